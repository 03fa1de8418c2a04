// MNN's AVX-512 VNNI int8 GEMM kernels (source/backend/cpu/x86_x64/avx512/GemmInt8_VNNI.cpp, compiled
// from the MNN tree given with -I) on deterministic inputs: a hash of what they write, and their time.
// Built twice by tools/bench/vnni_gemm.py, from the vendored MNN as released and from our patched tree,
// so patch 0004 (the same instruction without GCC's register copies) is shown to give the same bits and
// measured for what it saves; tests/runtime/test_vnni_gemm.py checks the bits.
//   vnni_gemm KERNEL REAL_DST SRC_DEPTH_QUAD BLOCKS DST_DEPTH_QUAD INPUT_BIAS INT8_OUT REPS
// KERNEL: int8 or w4 (int4 weights); REAL_DST: rows (1-4, a tile's); SRC_DEPTH_QUAD: groups of 4 inputs
// per block; BLOCKS: quantisation blocks; DST_DEPTH_QUAD: groups of 16 outputs; INPUT_BIAS: 1 for the
// asymmetric input quantisation MNN's low-memory mode uses by default; INT8_OUT: 1 for int8 output
// (int8 kernel only); REPS: timed calls (0: none). Prints "<fnv1a-64 of the output> <ns per call>".
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/x86_x64/avx512/GemmInt8_VNNI.cpp"
#include "probe_common.hpp"

using probe::floats;
using probe::next;

int main(int argc, char** argv) {
    if (argc != 9) {
        std::fprintf(stderr, "usage: %s int8|w4 REAL_DST SRC_DEPTH_QUAD BLOCKS DST_DEPTH_QUAD INPUT_BIAS INT8_OUT REPS\n",
                     argv[0]);
        return 2;
    }
    const bool w4 = std::strcmp(argv[1], "w4") == 0;
    const size_t realDst = std::atoi(argv[2]), sdq = std::atoi(argv[3]), blocks = std::atoi(argv[4]);
    const size_t ddq = std::atoi(argv[5]);
    const bool inputBias = std::atoi(argv[6]) != 0, int8Out = std::atoi(argv[7]) != 0;
    const int reps = std::atoi(argv[8]);
    const size_t L = GEMMINT8_AVX512_L, H = GEMMINT8_AVX512_H, E = GEMMINT8_AVX512_E;
    const size_t dz = (ddq * PACK_UNIT + H - 1) / H;  // weight tiles of H outputs (the last one padded)
    // a tile's weights: per block SRC_DEPTH_QUAD groups of L x H (half a byte each in w4), then H scales
    // and H biases (floats), as ConvInt8TiledExecutor packs them
    const size_t stepY = L * H / (w4 ? 2 : 1), stepZ = sdq * stepY + 2 * 4 * H;
    std::vector<int8_t> weight(dz * blocks * stepZ + 64), src(blocks * sdq * L * E + 64);
    for (auto& b : weight) b = static_cast<int8_t>(next());
    for (auto& b : src) b = static_cast<int8_t>(next());  // read as MNN's u8 inputs (its int8 + 128)
    for (size_t t = 0; t < dz * blocks; ++t) {
        auto params = floats(2 * H, -0.05f, 0.05f);
        std::memcpy(weight.data() + t * stepZ + sdq * stepY, params.data(), params.size() * sizeof(float));
    }
    auto srcKernelSum = floats(blocks * E, -4.f, 4.f), inputBiasV = floats(blocks * E, -1.f, 1.f);
    auto inputScale = floats(E * blocks, 0.001f, 0.02f), weightKernelSum = floats(dz * blocks * H, -2.f, 2.f);
    auto bias = floats(dz * H, -1.f, 1.f), scale = floats(dz * H, 0.001f, 0.01f);
    std::vector<float> accum(16 * PACK_UNIT * E);
    const size_t dstStep = E * PACK_UNIT * sizeof(float);
    std::vector<int8_t> dst(dz * (H / PACK_UNIT) * dstStep + 64, 0);

    QuanPostTreatParameters post;
    post.scale = scale.data();
    post.biasFloat = bias.data();
    post.maxValue = 127;
    post.minValue = -127;
    post.useInt8 = int8Out ? 1 : 0;
    post.srcKernelSum = srcKernelSum.data();
    post.weightKernelSum = weightKernelSum.data();
    post.fp32minmax = nullptr;
    post.blockNum = blocks;
    post.inputScale = int8Out ? nullptr : inputScale.data();
    post.inputBias = inputBias && !int8Out ? inputBiasV.data() : nullptr;
    post.accumBuffer = accum.data();
    auto kernel = w4 ? _AVX512_MNNGemmInt8AddBiasScale_16x4_w4_Unit_VNNI : _AVX512_MNNGemmInt8AddBiasScale_16x4_Unit_VNNI;
    kernel(dst.data(), src.data(), weight.data(), sdq, dstStep, ddq, &post, realDst);

    const uint64_t hash = probe::fnv1a(dst.data(), dst.size() * sizeof(dst[0]));
    double best = 0;
    for (int round = 0; round < 5 && reps > 0; ++round) {
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) kernel(dst.data(), src.data(), weight.data(), sdq, dstStep, ddq, &post, realDst);
        double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / reps;
        best = round == 0 || ns < best ? ns : best;
    }
    std::printf("%016llx %.1f\n", static_cast<unsigned long long>(hash), best);
    return 0;
}
