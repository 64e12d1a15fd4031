// Tile scheduler of the k-grouped GEMMs (API.md 3.6, the MoE weight gradient): G groups share M
// and N, each has its own K, and d[g] = c[g] + A_g @ B_g^T for all groups in one persistent launch,
// so that the tiles of group g + 1 fill the SMs group g's last wave leaves idle (one launch per
// group paid a partial wave and a start-up per group: NOTES.md, session 25). Both the FP8 1D1D
// kernel (fp8_gemm.cuh) and the BF16 kernel (bf16_gemm.cuh) run with it.
//
// Every group brings its own A, B and D descriptors, built on the host and passed by value in the
// kernel's parameters (KGroupedOperands: no device memory to fill, and a CUDA graph replays the
// launch as captured). FP8: group g's A and B are row-major [M, k_g] / [N, k_g] blocks of their own
// row stride k_g, which one descriptor cannot express. BF16: they are the MN-major [k_g, M] /
// [k_g, N] row ranges of a [sum(ks), M] / [sum(ks), N] tensor, and D may be BF16 or FP32, so one
// descriptor per group keeps each group's K and D rows clipped to its own. A unit's K blocks
// [k_block_begin, k_block_end) count from its group's first (0 to k_g / block K, as its A and B
// descriptors do). FP8's scale factors stay one descriptor each, sfa [M] and sfb [N] per 128 of K
// over the groups' concatenated K, read the group's first K block further (scale_k_block_origin,
// fp8_gemm.cuh's ScaleTileLoads).
//
// Units run group by group, each group's tiles in the dense scheduler's L2-friendly order. Only
// groups with K blocks are passed (an empty group keeps d[g] = c[g], which the host has written).
// No clusters, split-K or stream-K.
#pragma once

#include "../common/types.cuh"

#include "../common/ptx.cuh"
#include "scheduler.cuh"

namespace dg::sm90 {

// The kernel parameter holding the groups of one launch (at most kMaxGroups; the host launches
// more in several). Layout mirrored by dg_triton/kernels/sm90_k_grouped_gemm.py.
template <uint32_t kMaxGroups>
struct KGroupedOperands {
    TmaDescriptor a[kMaxGroups];   // group j's A: [M, k_j] (FP8 K-major, BF16 MN-major)
    TmaDescriptor b[kMaxGroups];   // group j's B: [N, k_j] likewise
    TmaDescriptor d[kMaxGroups];   // group j's D: [M, N] (FP8: FP32; BF16: FP32 or BF16)
    // Group j's K blocks are [k_block_start[j], k_block_start[j + 1]) of all groups' (FP8: of
    // the scale descriptors).
    uint32_t k_block_start[kMaxGroups + 1];
};

struct KGroupedWorkUnit : WorkUnit {
    uint32_t scale_k_origin;   // the group's first K block among all groups'
    const TmaDescriptor* tma_a;
    const TmaDescriptor* tma_b;
    const TmaDescriptor* tma_d;
};

__device__ __forceinline__ const TmaDescriptor* unit_tma_a(const TmaDescriptor&, const KGroupedWorkUnit& unit) {
    return unit.tma_a;
}
__device__ __forceinline__ const TmaDescriptor* unit_tma_b(const TmaDescriptor&, const KGroupedWorkUnit& unit) {
    return unit.tma_b;
}
__device__ __forceinline__ const TmaDescriptor* unit_tma_d(const TmaDescriptor&, const KGroupedWorkUnit& unit) {
    return unit.tma_d;
}
__device__ __forceinline__ uint32_t scale_k_block_origin(const KGroupedWorkUnit& unit) {
    return unit.scale_k_origin;
}

template <uint32_t kBlockM, uint32_t kBlockN, uint32_t kGroupM, uint32_t kMaxGroups>
struct KGroupedTileScheduler {
    using Order = PersistentTileScheduler<kBlockM, kBlockN, kGroupM, 1, 1>;
    const KGroupedOperands<kMaxGroups>* groups;
    uint32_t num_m_blocks, num_n_blocks, tiles_per_group, num_units, next_unit;

    // (`operands` by address: the kernel's parameter, not a copy of its kilobytes.)
    __device__ __forceinline__ KGroupedTileScheduler(const KGroupedOperands<kMaxGroups>* operands,
                                                     uint32_t num_groups, uint32_t m, uint32_t n)
        : groups(operands),
          num_m_blocks((m + kBlockM - 1) / kBlockM),
          num_n_blocks((n + kBlockN - 1) / kBlockN),
          tiles_per_group(num_m_blocks * num_n_blocks),
          num_units(tiles_per_group * num_groups),
          next_unit(blockIdx.x) {}

    using Unit = KGroupedWorkUnit;
    static constexpr bool kGrouped = false;   // (no row masking: the dense store)

    __device__ __forceinline__ bool next(KGroupedWorkUnit& unit) {
        if (next_unit >= num_units)
            return false;
        const uint32_t group = next_unit / tiles_per_group;
        const uint32_t tile_index = next_unit - group * tiles_per_group;
        Order::swizzle(tile_index, num_m_blocks, num_n_blocks, unit.m_block, unit.n_block);
        unit.tile = unit.m_block * num_n_blocks + unit.n_block;
        unit.split = 0;
        unit.scale_k_origin = groups->k_block_start[group];
        unit.k_block_begin = 0;
        unit.k_block_end = groups->k_block_start[group + 1] - unit.scale_k_origin;
        unit.tma_a = &groups->a[group];
        unit.tma_b = &groups->b[group];
        unit.tma_d = &groups->d[group];
        next_unit += gridDim.x;
        return true;
    }

    __device__ __forceinline__ static uint32_t a_row(const WorkUnit& unit) { return Order::a_row(unit); }
    __device__ __forceinline__ static uint32_t b_row(const WorkUnit& unit) { return Order::b_row(unit); }
    __device__ __forceinline__ static uint32_t b_k_offset(const WorkUnit&) { return 0; }
};

}  // namespace dg::sm90
