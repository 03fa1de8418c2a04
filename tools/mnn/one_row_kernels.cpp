// The one-row float GEMM paths of MNN's x86 kernels, timed in isolation:
// MNN's own sources are compiled into this program (the translation unit
// includes the kernel file, so its static kernels are callable), from the tree
// given with -I (ours, with patch 0002 applied).
//
//   AVX-512 (-DPROBE_AVX512, avx512/GemmCommon.cpp):
//     inexact  _AVX2_MNNPackedMatMul_1: MNN 3.6.1's lone row, even and odd l
//              summed apart in the halves of a zmm (not a batch row's bits)
//     exact    _AVX2_MNNPackedMatMul_1RowExact: patch 0002's lone row, one ymm
//              accumulator per 8 outputs summed over l in order
//     padded   _AVX2_MNNPackedMatMul_2 on the row twice: the batch tile, padded
//   AVX2+FMA (-DPROBE_AVX2, avxfma/GemmAVX2FMA.cpp):
//     inexact  _AVX_MNNPackednMatMulRemainCommon<float, false>, one row
//     exact    _AVX_MNNPackednMatMulRemainCommon<float, true>, one row
//              (patch 0002's _AVX_MNNPackedMatMul_1RowExact)
//     padded   _AVX_MNNPackednMatMulRemainCommon<float, false>, two rows
//
// For each shape (l, h) it checks that every exact kernel gives the padded
// tile's row bit for bit (what batch-exactness means) and prints one JSON line
// per kernel: nanoseconds per call (median of 15 timings) and per 16 products.
// tools/bench/one_row_kernels.py builds and runs it, and analyses the kernels'
// inner loops with llvm-mca for CPUs this machine is not.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#if defined(PROBE_AVX512)
#include "backend/cpu/x86_x64/avx512/GemmCommon.cpp"
static const int kPack = 16, kHP = 8;  // C: 16 floats per row and pair of blocks; B: 8-wide blocks
#elif defined(PROBE_AVX2)
#include "backend/cpu/x86_x64/avxfma/GemmAVX2FMA.cpp"
static const int kPack = 8, kHP = 4;
#else
#error "define PROBE_AVX512 or PROBE_AVX2"
#endif

typedef void (*Kernel)(float* C, const float* A, const float* B, const size_t* parameter);

#if defined(PROBE_AVX512)
static void inexact(float* C, const float* A, const float* B, const size_t* p) { _AVX2_MNNPackedMatMul_1(C, A, B, p); }
static void exact(float* C, const float* A, const float* B, const size_t* p) { _AVX2_MNNPackedMatMul_1RowExact(C, A, B, p); }
// patch 0013 compiles the few-row kernels once per prefetch hint: the one the library picks on this CPU
static void padded(float* C, const float* A, const float* B, const size_t* p) {
    if (gFewRowPrefetchIntoL2) {
        _AVX2_MNNPackedMatMul_2<true>(C, A, B, p);
    } else {
        _AVX2_MNNPackedMatMul_2<false>(C, A, B, p);
    }
}
static const struct { const char* name; Kernel kernel; int rows; } kKernels[] = {
    {"inexact", inexact, 1}, {"exact", exact, 1}, {"padded", padded, 2}};
#else
static void inexact(float* C, const float* A, const float* B, const size_t* p) {
    _AVX_MNNPackednMatMulRemainCommon<float, false>(C, A, B, 1, p);
}
static void exact(float* C, const float* A, const float* B, const size_t* p) {
    _AVX_MNNPackednMatMulRemainCommon<float, true>(C, A, B, 1, p);
}
static void padded(float* C, const float* A, const float* B, const size_t* p) {
    _AVX_MNNPackednMatMulRemainCommon<float, false>(C, A, B, 2, p);
}
static const struct { const char* name; Kernel kernel; int rows; } kKernels[] = {
    {"inexact", inexact, 1}, {"exact", exact, 1}, {"padded", padded, 2}};
#endif

static float value(unsigned& state) {  // deterministic values in [-1, 1)
    state = state * 1664525u + 1013904223u;
    return (float)((state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

int main(int argc, char** argv) {
    // shapes: decode attention of a 128-wide head: q.K^T (l = 128, h = context)
    // and p.V (l = context, h = 128), short and long contexts
    const int shapes[][2] = {{128, 64}, {128, 256}, {128, 1024}, {64, 128}, {256, 128}, {1024, 128}};
    const int eP = 48;  // A is packed [l][eP], the rows of a tile
    for (auto& shape : shapes) {
        const int l = shape[0], h = shape[1];
        const int blocks = (h + kHP - 1) / kHP;
        std::vector<float> A((size_t)l * eP), B((size_t)blocks * l * kHP), C((size_t)(blocks * kHP / kPack + 2) * kPack * eP);
        unsigned state = 12345u + l * 7 + h;
        for (int sy = 0; sy < l; ++sy) {
            A[sy * eP] = A[sy * eP + 1] = value(state);  // the padded tile's second row is the row again
        }
        for (auto& b : B) b = value(state);
        size_t parameter[6] = {eP * sizeof(float), (size_t)l, (size_t)h, (size_t)eP * kPack * sizeof(float), 0, 0};
        const size_t cStride = eP * kPack;
        // the padded tile's row 0 is the batch's bits; C holds pairs of blocks: [block/2][row][pack]
        auto row0 = [&](const std::vector<float>& c) {
            std::vector<float> out;
            for (int b = 0; b < blocks; ++b) {
                const float* p = c.data() + (b / (kPack / kHP)) * cStride + (b % (kPack / kHP)) * kHP;
                out.insert(out.end(), p, p + kHP);
            }
            return out;
        };
        std::fill(C.begin(), C.end(), 0.f);
        padded(C.data(), A.data(), B.data(), parameter);
        const std::vector<float> batch = row0(C);
        for (auto& k : kKernels) {
            std::fill(C.begin(), C.end(), 0.f);
            k.kernel(C.data(), A.data(), B.data(), parameter);
            const bool same = memcmp(row0(C).data(), batch.data(), batch.size() * sizeof(float)) == 0;
            const int reps = std::max(1, (int)(2e7 / ((double)l * h)));
            std::vector<double> times;
            for (int t = 0; t < 15; ++t) {
                auto start = std::chrono::steady_clock::now();
                for (int r = 0; r < reps; ++r) {
                    k.kernel(C.data(), A.data(), B.data(), parameter);
                    asm volatile("" ::: "memory");
                }
                times.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / reps);
            }
            std::sort(times.begin(), times.end());
            const double ns = times[times.size() / 2];
            printf("{\"kernel\": \"%s\", \"l\": %d, \"h\": %d, \"rows\": %d, \"batch_bits\": %s, \"ns\": %.1f, "
                   "\"ns_per_16_products\": %.3f}\n",
                   k.name, l, h, k.rows, same ? "true" : "false", ns, ns / ((double)l * h / 16.0));
        }
    }
    (void)argc;
    (void)argv;
    return 0;
}
