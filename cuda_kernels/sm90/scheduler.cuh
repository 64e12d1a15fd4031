// Persistent tile scheduler: CTA b walks work units b, b + gridDim.x, ... A unit is one output
// tile, or with split-K one K-slice of one tile. Within a K-slice, consecutive units sweep a group
// of kGroupM block-rows before moving along N, so the CTAs of one wave share A rows and B columns
// in L2 instead of streaming the whole of B once per row of tiles. The slice index varies slowest,
// so a wave works on one K range at a time. With clusters of 2 CTAs along M (or N), a cluster takes
// 2 adjacent tiles of one block-column (block-row) at once: rank r gets m_block = 2 * g + r (n_block
// = 2 * g + r), so its CTAs can share each B (A) tile through TMA multicast. The host guarantees
// the block count along the cluster's axis and the grid are multiples of the cluster size, so
// every CTA of a cluster walks the same sequence of K ranges. Grouped GEMMs reuse the mainloop and
// epilogue and replace only this.
#pragma once

#include "../common/types.cuh"

namespace dg::sm90 {

struct WorkUnit {
    uint32_t m_block, n_block;
    uint32_t tile;                      // m_block * num_n_blocks + n_block
    uint32_t split;                     // K-slice index
    uint32_t k_block_begin, k_block_end;
};

template <uint32_t kBlockM, uint32_t kBlockN, uint32_t kGroupM, uint32_t kClusterM,
          uint32_t kClusterN>
struct PersistentTileScheduler {
    static constexpr uint32_t kClusterSize = kClusterM * kClusterN;
    // The L2 group counts cluster-wide block-rows, so it spans kGroupM block-rows either way.
    static constexpr uint32_t kGroupRows = kGroupM / kClusterM > 0 ? kGroupM / kClusterM : 1;
    uint32_t num_m_blocks, num_n_blocks, num_tiles;
    // Tiles counted in cluster-wide units: a cluster takes kClusterM x kClusterN tiles at once.
    uint32_t num_m_groups, num_n_groups, num_group_tiles;
    uint32_t num_k_blocks, k_blocks_per_split, num_units;
    uint32_t next_unit, rank;

    // The host guarantees every slice is non-empty: (num_splits - 1) * per_split < num_k_blocks.
    __device__ __forceinline__ PersistentTileScheduler(uint32_t m, uint32_t n, uint32_t k_blocks,
                                                       uint32_t num_splits)
        : num_m_blocks((m + kBlockM - 1) / kBlockM),
          num_n_blocks((n + kBlockN - 1) / kBlockN),
          num_tiles(num_m_blocks * num_n_blocks),
          num_m_groups(num_m_blocks / kClusterM),
          num_n_groups(num_n_blocks / kClusterN),
          num_group_tiles(num_m_groups * num_n_groups),
          num_k_blocks(k_blocks),
          k_blocks_per_split((k_blocks + num_splits - 1) / num_splits),
          num_units(num_group_tiles * num_splits),
          next_unit(blockIdx.x / kClusterSize),
          rank(blockIdx.x % kClusterSize) {}

    // The grouped schedulers (scheduler_grouped.cuh) name their own unit type and are the only
    // ones that mask rows or hand out units without K blocks.
    using Unit = WorkUnit;
    static constexpr bool kGrouped = false;

    // Returns false when this CTA has no work left.
    __device__ __forceinline__ bool next(WorkUnit& unit) {
        if (next_unit >= num_units)
            return false;
        unit.split = next_unit / num_group_tiles;
        const uint32_t tile_index = next_unit - unit.split * num_group_tiles;
        uint32_t m_group, n_group;
        swizzle(tile_index, num_m_groups, num_n_groups, m_group, n_group);
        unit.m_block = kClusterM > 1 ? m_group * kClusterM + rank : m_group;
        unit.n_block = kClusterN > 1 ? n_group * kClusterN + rank : n_group;
        unit.tile = unit.m_block * num_n_blocks + unit.n_block;
        unit.k_block_begin = unit.split * k_blocks_per_split;
        unit.k_block_end = min(unit.k_block_begin + k_blocks_per_split, num_k_blocks);
        next_unit += gridDim.x / kClusterSize;
        return true;
    }

    // Tile `index` of a rows x cols grid of (cluster-wide) tiles in the L2-friendly order: groups
    // of kGroupRows rows, each swept column by column.
    __device__ __forceinline__ static void swizzle(uint32_t index, uint32_t rows, uint32_t cols,
                                                   uint32_t& row, uint32_t& col) {
        const uint32_t tiles_per_group = kGroupRows * cols;
        const uint32_t group = index / tiles_per_group;
        const uint32_t first_row = group * kGroupRows;
        const uint32_t rows_in_group = min(rows - first_row, kGroupRows);
        const uint32_t in_group = index - group * tiles_per_group;
        row = first_row + in_group % rows_in_group;
        col = in_group / rows_in_group;
    }

    // Where a unit's tiles start in the operands' 2-D descriptors (A rows, B rows, B's K offset);
    // the grouped schedulers move them by the group.
    __device__ __forceinline__ static uint32_t a_row(const WorkUnit& unit) {
        return unit.m_block * kBlockM;
    }
    __device__ __forceinline__ static uint32_t b_row(const WorkUnit& unit) {
        return unit.n_block * kBlockN;
    }
    __device__ __forceinline__ static uint32_t b_k_offset(const WorkUnit&) { return 0; }
};

// Stream-K (Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense Matrix
// Multiplication on the GPU", 2023), in its data-parallel + stream-K hybrid: when the tiles are
// not a whole number of waves, the last, partly filled wave leaves SMs idle (at M = 4096 every
// benchmark shape has 4 of the H200's 132 SMs idle throughout: 128 x k tiles). Here the first
// `dp_tiles` tiles of the L2-friendly order run whole, round-robin as PersistentTileScheduler
// hands them out; the K blocks of the remaining tiles, taken as one sequence (tile by tile),
// are cut into gridDim.x equal contiguous ranges, one per CTA. A tile whose K blocks fall into
// several CTAs' ranges is a "split" tile: each CTA computes its piece and SplitKEpilogue sums the
// pieces in piece order (piece 0 holds K block 0), so the result does not depend on which CTA
// finishes last. Nothing waits on another CTA (the last to arrive sums), so co-residency is not
// needed. The host guarantees at least one K block per CTA in the stream-K phase (so every CTA
// between a tile's first and last owner holds a piece of it) and sizes the workspace by
// heuristics.sm90.stream_k_plan, which mirrors this partition.
struct StreamKUnit : WorkUnit {
    uint32_t num_pieces;   // CTAs sharing this tile's K blocks; 1: a whole tile
};

template <uint32_t kBlockM, uint32_t kBlockN, uint32_t kGroupM>
struct StreamKTileScheduler {
    using Order = PersistentTileScheduler<kBlockM, kBlockN, kGroupM, 1, 1>;
    uint32_t num_m_blocks, num_n_blocks, num_tiles, num_k_blocks;
    uint32_t dp_tiles, num_sk_tiles;     // whole tiles first, then the stream-K tiles
    uint64_t sk_iterations;              // K blocks of all stream-K tiles
    uint32_t next_tile;                  // this CTA's next whole tile
    uint64_t iteration, iteration_end;   // this CTA's stream-K K blocks [iteration, iteration_end)

    __device__ __forceinline__ StreamKTileScheduler(uint32_t m, uint32_t n, uint32_t k_blocks,
                                                    uint32_t whole_tiles)
        : num_m_blocks((m + kBlockM - 1) / kBlockM),
          num_n_blocks((n + kBlockN - 1) / kBlockN),
          num_tiles(num_m_blocks * num_n_blocks),
          num_k_blocks(k_blocks),
          dp_tiles(min(whole_tiles, num_tiles)),
          num_sk_tiles(num_tiles - dp_tiles),
          sk_iterations(static_cast<uint64_t>(num_sk_tiles) * k_blocks),
          next_tile(blockIdx.x),
          iteration(first_iteration(blockIdx.x)),
          iteration_end(first_iteration(blockIdx.x + 1)) {}

    using Unit = StreamKUnit;
    static constexpr bool kGrouped = false;

    // CTA c's stream-K range starts here (the ranges differ in length by at most one K block).
    __device__ __forceinline__ uint64_t first_iteration(uint32_t cta) const {
        return static_cast<uint64_t>(cta) * sk_iterations / gridDim.x;
    }
    // The CTA whose range holds stream-K iteration x: the last c with first_iteration(c) <= x.
    __device__ __forceinline__ uint32_t owner(uint64_t x) const {
        return static_cast<uint32_t>(((x + 1) * gridDim.x - 1) / sk_iterations);
    }

    __device__ __forceinline__ bool next(StreamKUnit& unit) {
        uint32_t tile_index;
        if (next_tile < dp_tiles) {
            tile_index = next_tile;
            next_tile += gridDim.x;
            unit.split = 0;
            unit.num_pieces = 1;
            unit.k_block_begin = 0;
            unit.k_block_end = num_k_blocks;
            unit.tile = tile_index;
        } else if (iteration < iteration_end) {
            const uint32_t sk_tile = static_cast<uint32_t>(iteration / num_k_blocks);
            const uint64_t tile_begin = static_cast<uint64_t>(sk_tile) * num_k_blocks;
            unit.k_block_begin = static_cast<uint32_t>(iteration - tile_begin);
            unit.k_block_end = static_cast<uint32_t>(
                min(static_cast<uint64_t>(num_k_blocks), iteration_end - tile_begin));
            const uint32_t first_owner = owner(tile_begin);
            unit.num_pieces = owner(tile_begin + num_k_blocks - 1) - first_owner + 1;
            unit.split = blockIdx.x - first_owner;
            unit.tile = sk_tile;   // SplitKEpilogue's index: among the stream-K tiles
            iteration = tile_begin + unit.k_block_end;
            tile_index = dp_tiles + sk_tile;
        } else {
            return false;
        }
        Order::swizzle(tile_index, num_m_blocks, num_n_blocks, unit.m_block, unit.n_block);
        return true;
    }

    __device__ __forceinline__ static uint32_t a_row(const WorkUnit& unit) { return Order::a_row(unit); }
    __device__ __forceinline__ static uint32_t b_row(const WorkUnit& unit) { return Order::b_row(unit); }
    __device__ __forceinline__ static uint32_t b_k_offset(const WorkUnit&) { return 0; }
};

}  // namespace dg::sm90
