// Persistent tile scheduler: CTA b walks tiles b, b + gridDim.x, ... in an L2-friendly order.
// Consecutive tiles sweep a group of kGroupM block-rows before moving along N, so the CTAs of one
// wave share A rows and B columns in L2 instead of streaming the whole of B once per row of tiles.
// Grouped GEMMs reuse the mainloop and epilogue and replace only this.
#pragma once

#include "../common/types.cuh"

namespace dg::sm90 {

template <uint32_t kBlockM, uint32_t kBlockN, uint32_t kGroupM>
struct PersistentTileScheduler {
    uint32_t num_m_blocks, num_n_blocks, num_tiles;
    uint32_t next_tile;

    __device__ __forceinline__ PersistentTileScheduler(uint32_t m, uint32_t n)
        : num_m_blocks((m + kBlockM - 1) / kBlockM),
          num_n_blocks((n + kBlockN - 1) / kBlockN),
          num_tiles(num_m_blocks * num_n_blocks),
          next_tile(blockIdx.x) {}

    // Returns false when this CTA has no tiles left.
    __device__ __forceinline__ bool next(uint32_t& m_block, uint32_t& n_block) {
        if (next_tile >= num_tiles)
            return false;
        const uint32_t tiles_per_group = kGroupM * num_n_blocks;
        const uint32_t group = next_tile / tiles_per_group;
        const uint32_t first_m = group * kGroupM;
        const uint32_t rows_in_group = min(num_m_blocks - first_m, kGroupM);
        const uint32_t in_group = next_tile - group * tiles_per_group;
        m_block = first_m + in_group % rows_in_group;
        n_block = in_group / rows_in_group;
        next_tile += gridDim.x;
        return true;
    }
};

}  // namespace dg::sm90
