// Split-K epilogue: several CTAs compute K-slices of one tile; each writes its FP32 partial to a
// workspace, and the last to arrive (a per-tile counter) sums all partials in slice order
// 0, 1, ..., S-1 and writes D. The order never depends on which CTA came last, so results are
// bitwise reproducible run to run (use_deterministic_algorithms holds by construction). The
// counter is reset by that last CTA, so the buffer stays zeroed for the next launch.
// Used where few tiles would leave most SMs idle (small M); plain stores suffice there.
#pragma once

#include <cuda_bf16.h>
#include "../common/types.cuh"

#include "../common/ptx.cuh"
#include "scheduler.cuh"
#include "wgmma.cuh"

namespace dg::sm90 {

template <typename OutT> __device__ __forceinline__ void store_global(OutT* p, float v);
template <> __device__ __forceinline__ void store_global<float>(float* p, float v) { *p = v; }
template <> __device__ __forceinline__ void store_global<__nv_bfloat16>(__nv_bfloat16* p, float v) {
    *p = __float2bfloat16_rn(v);
}
template <typename OutT> __device__ __forceinline__ float load_global(const OutT* p);
template <> __device__ __forceinline__ float load_global<float>(const float* p) { return *p; }
template <> __device__ __forceinline__ float load_global<__nv_bfloat16>(const __nv_bfloat16* p) {
    return __bfloat162float(*p);
}

template <typename OutT, uint32_t kBlockN, uint32_t kNumMathWarpgroups, bool kAccumulate>
struct SplitKEpilogue {
    static constexpr uint32_t kRows = 64;
    static constexpr uint32_t kChunkFloats = kRows * kBlockN;  // one warpgroup's partial

    // workspace: [num_splits][num_tiles][kNumMathWarpgroups][64][kBlockN] FP32;
    // counters: [num_tiles][kNumMathWarpgroups] uint32, zero between launches.
    __device__ __forceinline__ static void store(
            const float* acc, const WorkUnit& unit, uint32_t num_splits, uint32_t num_tiles,
            uint32_t math_wg, float* workspace, uint32_t* counters, OutT* d, uint32_t ld_d,
            uint32_t m, uint32_t n, uint32_t* is_last_flag, uint32_t barrier_id) {
        const uint32_t thread = threadIdx.x % 128;
        const auto chunk = [&](uint32_t split) {
            return workspace + ((static_cast<uint64_t>(split) * num_tiles + unit.tile) *
                                kNumMathWarpgroups + math_wg) * kChunkFloats;
        };
        float* mine = chunk(unit.split);
#pragma unroll
        for (uint32_t t = 0; t < kBlockN / 8; ++t)
#pragma unroll
            for (uint32_t half = 0; half < 2; ++half) {
                const uint32_t row = fragment_row(half), col = fragment_col(t);
                *reinterpret_cast<float2*>(mine + row * kBlockN + col) =
                    make_float2(acc[t * 4 + half * 2], acc[t * 4 + half * 2 + 1]);
            }
        // Release this partial, then count arrivals (classic threadfence-reduction protocol).
        __threadfence();
        named_barrier_sync(barrier_id, 128);
        uint32_t* counter = counters + unit.tile * kNumMathWarpgroups + math_wg;
        if (thread == 0) {
            const uint32_t arrived = atomicAdd(counter, 1) + 1;
            const bool last = arrived == num_splits;
            if (last)
                *counter = 0;
            *is_last_flag = last;
        }
        named_barrier_sync(barrier_id, 128);
        if (!*is_last_flag)
            return;
        __threadfence();  // acquire: the other slices' partials are visible after this

        // Sum the slices in order, a few columns at a time (registers stay bounded for wide
        // tiles). Within a chunk all of a slice's loads are issued before any is used, so the L2
        // latency is paid once per slice and chunk, not once per element.
        constexpr uint32_t kChunkT = (kBlockN / 8) % 4 == 0 ? 4 : 2;  // n8 column groups per chunk
        const uint32_t row0 = unit.m_block * (kRows * kNumMathWarpgroups) + math_wg * kRows;
        const uint32_t col0 = unit.n_block * kBlockN;
#pragma unroll
        for (uint32_t t0 = 0; t0 < kBlockN / 8; t0 += kChunkT) {
            float sums[kChunkT * 4];
#pragma unroll
            for (uint32_t i = 0; i < kChunkT * 4; ++i)
                sums[i] = 0.0f;
            for (uint32_t s = 0; s < num_splits; ++s) {
                float loaded[kChunkT * 4];
                if (s == unit.split) {
#pragma unroll
                    for (uint32_t i = 0; i < kChunkT * 4; ++i)
                        loaded[i] = acc[t0 * 4 + i];
                } else {
                    const float* partial = chunk(s);
#pragma unroll
                    for (uint32_t t = 0; t < kChunkT; ++t)
#pragma unroll
                        for (uint32_t half = 0; half < 2; ++half) {
                            const uint32_t row = fragment_row(half), col = fragment_col(t0 + t);
                            // .cg: written by other CTAs during this kernel, so bypass L1
                            const float2 v = __ldcg(
                                reinterpret_cast<const float2*>(partial + row * kBlockN + col));
                            loaded[t * 4 + half * 2] = v.x;
                            loaded[t * 4 + half * 2 + 1] = v.y;
                        }
                }
#pragma unroll
                for (uint32_t i = 0; i < kChunkT * 4; ++i)
                    sums[i] += loaded[i];
            }
#pragma unroll
            for (uint32_t t = 0; t < kChunkT; ++t)
#pragma unroll
                for (uint32_t half = 0; half < 2; ++half) {
                    const uint32_t grow = row0 + fragment_row(half);
                    const uint32_t gcol = col0 + fragment_col(t0 + t);
                    if (grow >= m)
                        continue;
                    float sum0 = sums[t * 4 + half * 2], sum1 = sums[t * 4 + half * 2 + 1];
                    OutT* out = d + static_cast<uint64_t>(grow) * ld_d + gcol;
                    if (gcol < n) {
                        if constexpr (kAccumulate) sum0 += load_global(out);
                        store_global(out, sum0);
                    }
                    if (gcol + 1 < n) {
                        if constexpr (kAccumulate) sum1 += load_global(out + 1);
                        store_global(out + 1, sum1);
                    }
                }
        }
    }
};

}  // namespace dg::sm90
