// What the kernel probes (vnni_gemm.cpp, sum_by_axis.cpp) share: deterministic inputs, so that two builds
// or two forms of a kernel see the same bytes, and a hash of what a kernel wrote.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace probe {

inline uint32_t next() {  // xorshift64*
    static uint64_t state = 0x9E3779B97F4A7C15ull;
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return static_cast<uint32_t>((state * 0x2545F4914F6CDD1Dull) >> 32);
}

inline float uniform(float low, float high) { return low + (high - low) * (next() >> 8) / 16777216.0f; }

inline std::vector<float> floats(size_t n, float low, float high) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(low, high);
    return v;
}

inline uint64_t fnv1a(const void* data, size_t size) {  // FNV-1a, 64 bits
    uint64_t h = 1469598103934665603ull;
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
}

}  // namespace probe
