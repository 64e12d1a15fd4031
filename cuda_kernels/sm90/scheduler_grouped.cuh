// Tile schedulers of the M-grouped GEMMs (API.md 3.4, 3.5): the dense GEMMs' mainloops and
// epilogues (bf16_gemm.cuh, fp8_gemm.cuh, gemm_pipeline.cuh) with only the scheduler swapped
// (STYLE.md).
//
// Every operand is seen through a 2-D TMA descriptor: A and D as [M, K] / [M, N] (contiguous) or
// [G * max_m, K] / [G * max_m, N] (masked); B as [G * N, K] (K-major: group g's rows start at
// g * N) or [G * K, N] (MN-major: group g's K rows start at g * K). A unit's tile of B is then
// b[group] at a row or K offset; a K-major B tile past N reads the next group's rows (or TMA's
// zero fill after the last group), which only feed columns the store clips.
//
// The group structure lives on the device and is read here, by every role of every CTA (the
// producer thread and each consumer warpgroup run their own copy, so they agree without talking):
// no host sync, and a CUDA graph replays correctly after the caller rewrites it. Schedulers are
// built after griddepcontrol_wait (bf16_gemm_run, fp8_gemm_run), so under PDL they read what the previous kernel
// wrote. Out-of-range group ids read as padding, so a bad layout can never send a load past B.
//
// What each unit writes follows the portable kernels (dg_triton/triton/grouped_portable.py) and
// dg_triton/reference_grouped.py exactly:
// - contiguous, index layout: a tile's group is that of its first row; a tile whose first row is
//   padding (-1) loads nothing and does no MMA, and its rows are written as zeros; inside a tile
//   of a group, rows marked -1 are written as zeros (keeps_row reads each row's id);
// - contiguous, psum layout: group g owns rows [align(psum[g-1], alignment), psum[g]); its tile
//   computes the rows below psum[g]; gap rows below psum[G-1] are zeros when zero_gaps
//   (ensure_zero_padding), else untouched; rows at or past psum[G-1] are never written, and tiles
//   with nothing to write are skipped;
// - masked: group g's tiles cover rows [0, masked_m[g]) (clamped to [0, max_m]); only those rows
//   are written; tiles at or past masked_m[g] are not handed out at all.
// Grouped units never use clusters or split-K. The FP8 kernel's A-scale loads (ScaleTileLoads)
// take the unit's group and m_block: masked groups' scales sit one after another in K blocks.
#pragma once

#include "../common/types.cuh"

#include "scheduler.cuh"

namespace dg::sm90 {

// A dense unit plus where its tiles sit in the descriptors and which of its rows are written.
struct GroupedWorkUnit : WorkUnit {
    uint32_t group;
    uint32_t a_row;          // the tile's first row in A's descriptor (and in D's)
    uint32_t b_row;          // its first row of B in B's descriptor
    uint32_t b_k_offset;     // the group's K offset in B's descriptor (MN-major B)
    uint32_t rows_computed;  // tile rows below this may hold A @ B; the others are zeros
    uint32_t rows_written;   // tile rows below this are stored; the others keep D's content
};

// Fills the descriptor coordinates of a grouped unit of group `group`.
template <uint32_t kBlockM, uint32_t kBlockN, bool kBKMajor>
__device__ __forceinline__ void place_grouped_unit(GroupedWorkUnit& unit, uint32_t group,
                                                   uint32_t group_first_row, uint32_t n, uint32_t k) {
    unit.group = group;
    unit.a_row = group_first_row + unit.m_block * kBlockM;
    unit.b_row = (kBKMajor ? group * n : 0) + unit.n_block * kBlockN;
    unit.b_k_offset = kBKMajor ? 0 : group * k;
}

__device__ __forceinline__ uint32_t clamp_rows(int32_t rows, uint32_t limit) {
    return rows <= 0 ? 0u : min(static_cast<uint32_t>(rows), limit);
}

// ---- contiguous: all tokens in one [M, K] A, grouped by expert --------------------------------
// The tiles of ceil(M / BM) x ceil(N / BN) in the dense scheduler's L2-friendly order, each given
// the group of its first row; tiles with nothing to write are passed over. The host picks BM
// dividing the mk alignment, so a tile never spans two groups.
template <uint32_t kBlockM, uint32_t kBlockN, uint32_t kGroupM, bool kBKMajor, bool kPsumLayout>
struct ContiguousGroupedScheduler {
    using Unit = GroupedWorkUnit;
    using Tiles = PersistentTileScheduler<kBlockM, kBlockN, kGroupM, 1, 1>;
    static constexpr bool kGrouped = true;

    const int32_t* layout;      // [M] group per row (index layout) or [G] end rows (psum)
    uint32_t num_groups, m, n, k, mk_alignment;
    bool zero_gaps;
    uint32_t last_end;          // psum: rows at or past psum[G-1] (clamped to M) are untouched
    uint32_t num_k_blocks, num_m_blocks, num_n_blocks, next_unit;

    __device__ __forceinline__ ContiguousGroupedScheduler(const int32_t* layout_, uint32_t num_groups_,
                                                          uint32_t m_, uint32_t n_, uint32_t k_,
                                                          uint32_t num_k_blocks_, uint32_t mk_alignment_,
                                                          uint32_t zero_gaps_)
        : layout(layout_), num_groups(num_groups_), m(m_), n(n_), k(k_), mk_alignment(mk_alignment_),
          zero_gaps(zero_gaps_ != 0), last_end(m_), num_k_blocks(num_k_blocks_),
          num_m_blocks((m_ + kBlockM - 1) / kBlockM), num_n_blocks((n_ + kBlockN - 1) / kBlockN),
          next_unit(blockIdx.x) {
        if constexpr (kPsumLayout)
            last_end = clamp_rows(layout_[num_groups_ - 1], m_);
    }

    // psum: the last group whose first row align(psum[g-1], alignment) is at or before `row`
    // (empty groups share their start with the next one; the last of them owns the rows).
    __device__ __forceinline__ uint32_t psum_group_of(uint32_t row) const {
        uint32_t lo = 0, hi = num_groups - 1;
        while (lo < hi) {
            const uint32_t mid = (lo + hi + 1) / 2;
            const int32_t previous_end = layout[mid - 1];
            const uint32_t start = previous_end <= 0 ? 0u
                : (static_cast<uint32_t>(previous_end) + mk_alignment - 1) / mk_alignment * mk_alignment;
            if (start <= row)
                lo = mid;
            else
                hi = mid - 1;
        }
        return lo;
    }

    __device__ __forceinline__ bool next(GroupedWorkUnit& unit) {
        for (; next_unit < num_m_blocks * num_n_blocks; next_unit += gridDim.x) {
            Tiles::swizzle(next_unit, num_m_blocks, num_n_blocks, unit.m_block, unit.n_block);
            const uint32_t first_row = unit.m_block * kBlockM;
            uint32_t group;
            if constexpr (kPsumLayout) {
                if (first_row >= last_end)
                    continue;
                // Clamped to M as well: a row count past M would send a plain store past D.
                const uint32_t tile_rows = min(m - first_row, kBlockM);
                group = psum_group_of(first_row);
                unit.rows_computed = clamp_rows(layout[group] - static_cast<int32_t>(first_row), tile_rows);
                unit.rows_written = zero_gaps ? min(last_end - first_row, tile_rows) : unit.rows_computed;
                if (unit.rows_written == 0)
                    continue;
            } else {
                const int32_t id = layout[first_row];
                const bool padding = id < 0 || id >= static_cast<int32_t>(num_groups);
                group = padding ? 0u : static_cast<uint32_t>(id);
                unit.rows_computed = padding ? 0u : kBlockM;
                unit.rows_written = kBlockM;  // the TMA store clips rows past M
            }
            unit.tile = unit.m_block * num_n_blocks + unit.n_block;
            unit.split = 0;
            unit.k_block_begin = 0;
            unit.k_block_end = unit.rows_computed == 0 ? 0 : num_k_blocks;  // zeros only: no loads, no MMAs
            place_grouped_unit<kBlockM, kBlockN, kBKMajor>(unit, group, 0, n, k);
            next_unit += gridDim.x;
            return true;
        }
        return false;
    }

    // Whether tile row `row` keeps its product (else it is written as zero). Index layout: its
    // own id must be a group (a -1 row inside a group's last tile is padding).
    __device__ __forceinline__ bool keeps_row(const GroupedWorkUnit& unit, uint32_t row) const {
        if constexpr (kPsumLayout) {
            return row < unit.rows_computed;
        } else {
            const uint32_t global_row = unit.a_row + row;
            if (unit.rows_computed == 0 || global_row >= m)
                return false;
            const int32_t id = layout[global_row];
            return id >= 0 && id < static_cast<int32_t>(num_groups);
        }
    }

    __device__ __forceinline__ static uint32_t a_row(const GroupedWorkUnit& unit) { return unit.a_row; }
    __device__ __forceinline__ static uint32_t b_row(const GroupedWorkUnit& unit) { return unit.b_row; }
    __device__ __forceinline__ static uint32_t b_k_offset(const GroupedWorkUnit& unit) {
        return unit.b_k_offset;
    }
};

// ---- masked: [G, max_m, K] A with masked_m[g] valid rows per group ----------------------------
// Units are numbered group after group, ceil(masked_m[g] / BM) x ceil(N / BN) tiles per group (in
// the dense L2-friendly order inside a group); CTA b takes units b, b + gridDim.x, ... Its unit
// numbers only grow, so it walks the groups forward once, reading each masked_m[g] once.
template <uint32_t kBlockM, uint32_t kBlockN, uint32_t kGroupM, bool kBKMajor>
struct MaskedGroupedScheduler {
    using Unit = GroupedWorkUnit;
    using Tiles = PersistentTileScheduler<kBlockM, kBlockN, kGroupM, 1, 1>;
    static constexpr bool kGrouped = true;

    const int32_t* masked_m;
    uint32_t num_groups, max_m, n, k, num_k_blocks, num_n_blocks;
    uint32_t group, group_rows, group_m_blocks, group_first_unit;
    uint32_t next_unit;

    __device__ __forceinline__ MaskedGroupedScheduler(const int32_t* masked_m_, uint32_t num_groups_,
                                                      uint32_t max_m_, uint32_t n_, uint32_t k_,
                                                      uint32_t num_k_blocks_)
        : masked_m(masked_m_), num_groups(num_groups_), max_m(max_m_), n(n_), k(k_),
          num_k_blocks(num_k_blocks_), num_n_blocks((n_ + kBlockN - 1) / kBlockN), group(0),
          group_first_unit(0), next_unit(blockIdx.x) {
        enter_group();
    }

    __device__ __forceinline__ void enter_group() {
        group_rows = clamp_rows(masked_m[group], max_m);
        group_m_blocks = (group_rows + kBlockM - 1) / kBlockM;
    }

    __device__ __forceinline__ bool next(GroupedWorkUnit& unit) {
        while (next_unit >= group_first_unit + group_m_blocks * num_n_blocks) {
            group_first_unit += group_m_blocks * num_n_blocks;
            if (++group >= num_groups)
                return false;
            enter_group();
        }
        Tiles::swizzle(next_unit - group_first_unit, group_m_blocks, num_n_blocks, unit.m_block,
                       unit.n_block);
        unit.tile = unit.m_block * num_n_blocks + unit.n_block;
        unit.split = 0;
        unit.k_block_begin = 0;
        unit.k_block_end = num_k_blocks;
        unit.rows_computed = unit.rows_written = min(group_rows - unit.m_block * kBlockM, kBlockM);
        place_grouped_unit<kBlockM, kBlockN, kBKMajor>(unit, group, group * max_m, n, k);
        next_unit += gridDim.x;
        return true;
    }

    // Rows past masked_m are not stored at all (rows_written), so every stored row keeps its product.
    __device__ __forceinline__ bool keeps_row(const GroupedWorkUnit&, uint32_t) const { return true; }

    __device__ __forceinline__ static uint32_t a_row(const GroupedWorkUnit& unit) { return unit.a_row; }
    __device__ __forceinline__ static uint32_t b_row(const GroupedWorkUnit& unit) { return unit.b_row; }
    __device__ __forceinline__ static uint32_t b_k_offset(const GroupedWorkUnit& unit) {
        return unit.b_k_offset;
    }
};

}  // namespace dg::sm90
