// MNN's input sums for its int8 GEMMs (MNNSumByAxisLForMatmul_A, what the weights' zero points are
// subtracted with): the C form of MNN 3.6.1 as released (compute/CommonOptFunction.cpp from the vendored
// tarball, built in its own object with -DSUM_BY_AXIS_REFERENCE and MNN's baseline flags) against patch
// 0005's AVX2 form (x86_x64/avx/ReorderFunctions.cpp from our tree, -mavx2 -mfma), reached the way MNN
// reaches it: _AVX_ReorderInit over a function table holding the C form, which it keeps for the tiles it
// leaves to it. Built by tools/bench/sum_by_axis.py; tests/runtime/test_sum_by_axis.py checks the bits.
//   sum_by_axis ROWS BLOCKS LU KERNELXY VALID ONE_SCALE INPUT_BLOCK REPS
// ROWS: input rows (tiles of 4, the last one shorter); BLOCKS: quantisation blocks; LU: groups of 4
// inputs over all blocks; KERNELXY: kernel positions; VALID: bytes of the last group (0: all 4);
// ONE_SCALE: one scale for all rows; INPUT_BLOCK: a scale per row and block; REPS: timed calls (0: none).
// Prints "<fnv1a-64 of the C form's output> <of patch 0005's> <ns per call, C form> <patch 0005>".
#include <cstddef>
#include <cstdint>
#include <sys/types.h>

#ifdef SUM_BY_AXIS_REFERENCE
#include "backend/cpu/compute/CommonOptFunction.cpp"

void reference_sum_by_axis(float* dest, int8_t* source, const float* scale, ssize_t rows, SumByAxisParams params) {
    MNNSumByAxisLForMatmul_A(dest, source, scale, rows, params);
}
#else
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/x86_x64/avx/ReorderFunctions.cpp"
#include "probe_common.hpp"

void reference_sum_by_axis(float* dest, int8_t* source, const float* scale, ssize_t rows, SumByAxisParams params);

namespace {

using SumByAxis = void (*)(float*, int8_t*, const float*, ssize_t, SumByAxisParams);

double ns_per_call(SumByAxis f, std::vector<float>& dest, std::vector<int8_t>& src, const std::vector<float>& scale,
                   ssize_t rows, const SumByAxisParams& params, int reps) {
    if (reps == 0) {
        return 0;
    }
    f(dest.data(), src.data(), scale.data(), rows, params);  // warm
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
        f(dest.data(), src.data(), scale.data(), rows, params);
    }
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 9) {
        std::fprintf(stderr, "usage: %s ROWS BLOCKS LU KERNELXY VALID ONE_SCALE INPUT_BLOCK REPS\n", argv[0]);
        return 2;
    }
    const ssize_t rows = std::atoi(argv[1]), blocks = std::atoi(argv[2]), lu = std::atoi(argv[3]);
    const ssize_t kernelxy = std::atoi(argv[4]), valid = std::atoi(argv[5]);
    const bool oneScale = std::atoi(argv[6]) != 0, inputBlock = std::atoi(argv[7]) != 0;
    const int reps = std::atoi(argv[8]);
    const ssize_t EP = 4, LP = 4;  // x86's int8 GEMM tile (GEMMINT8_AVX512_E/L, AVX2's the same)
    SumByAxisParams params{};
    params.unitColBufferSize = EP * LP * lu * kernelxy;  // a whole tile's bytes, as ConvInt8TiledExecutor packs
    params.DST_XUNIT = EP;
    params.SRC_UNIT = LP;
    params.blockNum = blocks;
    params.oneScale = oneScale;
    params.valid = valid;
    params.kernelxy = kernelxy;
    params.LU = lu;
    params.inputBlock = inputBlock;
    const ssize_t tiles = (rows + EP - 1) / EP;
    std::vector<int8_t> src(tiles * params.unitColBufferSize + 64);
    for (auto& b : src) b = static_cast<int8_t>(probe::next());  // read as MNN's u8 inputs (its int8 + 128)
    std::vector<float> scale(rows * blocks + 1);
    for (auto& s : scale) s = probe::uniform(0.001f, 0.021f);

    MNN::CoreFunctions core{};
    core.MNNSumByAxisLForMatmul_A = reference_sum_by_axis;
    _AVX_ReorderInit(&core);  // patch 0005 takes the place of the C form, keeping it for other tiles
    if (core.MNNSumByAxisLForMatmul_A == reference_sum_by_axis ||
        core.int8MatmulRelatedFunctions.MNNSumByAxisLForMatmul_A != core.MNNSumByAxisLForMatmul_A) {
        std::fprintf(stderr, "_AVX_ReorderInit did not install an AVX2 form\n");
        return 3;
    }
    std::vector<float> reference(rows * blocks, -1.0f), patched(rows * blocks, -2.0f);
    reference_sum_by_axis(reference.data(), src.data(), scale.data(), rows, params);
    core.MNNSumByAxisLForMatmul_A(patched.data(), src.data(), scale.data(), rows, params);
    const double nsReference = ns_per_call(reference_sum_by_axis, reference, src, scale, rows, params, reps);
    const double nsPatched = ns_per_call(core.MNNSumByAxisLForMatmul_A, patched, src, scale, rows, params, reps);
    const auto hash = [](const std::vector<float>& v) {
        return static_cast<unsigned long long>(probe::fnv1a(v.data(), v.size() * sizeof(float)));
    };
    std::printf("%016llx %016llx %.1f %.1f\n", hash(reference), hash(patched), nsReference, nsPatched);
    return 0;
}
#endif
