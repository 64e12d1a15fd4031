// Epilogue: accumulators -> shared memory (swizzled as TMA expects, so the writes mostly avoid
// bank conflicts) -> TMA store. With kAccumulate the current D tile is first brought in by TMA and added
// in FP32, so D = D + acc is rounded once, as the reference rounds (c.float() + A@B).to(dtype)
// (its first chunk while the tile's K loop still runs, where the kernel asks: prefetch_accumulator).
// Each math warpgroup owns its 64 rows (or, in a column-split FP8 tile, its column half) of the
// tile and its own staging buffer, so warpgroups never wait for each other here.
#pragma once

#include <cuda_bf16.h>
#include "../common/types.cuh"

#include "../common/ptx.cuh"
#include "wgmma.cuh"

namespace dg::sm90 {

// Shared-memory accesses through 32-bit shared-window addresses (ld/st.shared): generic
// pointers would cost 64-bit address registers per element and spill the epilogue.
template <typename OutT> struct OutputPair;

template <> struct OutputPair<float> {
    static constexpr bool kSixteenBit = false;
    __device__ __forceinline__ static float2 load(uint32_t addr) {
        float2 v;
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
        return v;
    }
    __device__ __forceinline__ static void store(uint32_t addr, float2 v) {
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(v.x), "f"(v.y));
    }
};

template <> struct OutputPair<__nv_bfloat16> {
    static constexpr bool kSixteenBit = true;
    __device__ __forceinline__ static uint32_t pack(float x, float y) {
        __nv_bfloat162 packed = __float22bfloat162_rn(make_float2(x, y));
        return *reinterpret_cast<uint32_t*>(&packed);
    }
    __device__ __forceinline__ static float2 load(uint32_t addr) {
        uint32_t bits;
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(bits) : "r"(addr));
        return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&bits));
    }
    __device__ __forceinline__ static void store(uint32_t addr, float2 v) {
        __nv_bfloat162 packed = __float22bfloat162_rn(v);
        asm volatile("st.shared.b32 [%0], %1;"
                     :: "r"(addr), "r"(*reinterpret_cast<uint32_t*>(&packed)));
    }
};

// kMaxChunkSlabs: the most slabs a chunk may stage at once, from the shared memory the traits'
// pipeline leaves (a ring deeper than the default staging allows; the default otherwise).
// kWholeRowsForC: an accumulating tile stages whole rows where that room holds them (the FP8
// kernel, whose early c load, prefetch_accumulator, brings the first chunk only).
template <typename OutT, uint32_t kBlockN, bool kAccumulate, uint32_t kMaxChunkSlabs = 0xffffffffu,
          bool kWholeRowsForC = false>
struct SwizzledTmaStoreEpilogue {
    static constexpr uint32_t kRows = 64;  // one warpgroup's wgmma M
    static constexpr uint32_t kRowBytes = kBlockN * sizeof(OutT);
    // The widest TMA swizzle span (128, 64 or 32 bytes) that tiles a row of the block exactly; a
    // TMA box row may not be wider than its swizzle span, so the tile is stored as slabs of
    // kSlabCols columns. Narrower spans only cost some bank conflicts on the shared-memory writes.
    static constexpr uint32_t kSwizzleBytes = kRowBytes % 128 == 0 ? 128 : kRowBytes % 64 == 0 ? 64 : 32;
    static constexpr uint32_t kSlabCols = kSwizzleBytes / sizeof(OutT);
    static constexpr uint32_t kNumSlabs = kBlockN / kSlabCols;
    static constexpr uint32_t kSlabBytes = kRows * kSwizzleBytes;
    // Rows wider than 256 bytes (with an even slab count) are staged half at a time: the staging
    // buffer shrinks by half, which buys the widest tiles one more pipeline stage (128x256 BF16:
    // 3 -> 4). With kWholeRowsForC an accumulating tile stages whole rows where the ring leaves
    // room for them: an early c load (prefetch_accumulator) brings only the first chunk, the rest
    // waits for the store (k-grouped FP8 at 128x128 4 stages, whole rows, ran 6-8 % faster than
    // with half rows at 4 or 5 stages on an H100; NOTES.md, session 25). A deeper ring than
    // that leaves room for narrows the chunks to kMaxChunkSlabs slabs (the last chunk takes the
    // rest), e.g. 128x144 BF16 at 6 stages: 80 columns, then 64. Mirrored by
    // heuristics.sm90.epilogue_staging_cols / epilogue_chunk_cols.
    static constexpr uint32_t kDefaultChunkSlabs =
        (kRowBytes > 256 && kNumSlabs % 2 == 0 &&
         !(kWholeRowsForC && kAccumulate && kMaxChunkSlabs >= kNumSlabs))
            ? kNumSlabs / 2 : kNumSlabs;
    static constexpr uint32_t kChunkSlabs =
        kDefaultChunkSlabs < kMaxChunkSlabs ? kDefaultChunkSlabs : kMaxChunkSlabs;
    static_assert(kChunkSlabs >= 1, "no room for one slab of staging");
    static constexpr uint32_t kNumChunks = (kNumSlabs + kChunkSlabs - 1) / kChunkSlabs;
    static constexpr uint32_t kChunkCols = kChunkSlabs * kSlabCols;
    static constexpr uint32_t kBytesPerWarpgroup = kChunkSlabs * kSlabBytes;
    // Slabs in chunk `chunk` (all but the last have kChunkSlabs).
    __device__ __forceinline__ static constexpr uint32_t chunk_slabs(uint32_t chunk) {
        return kNumSlabs - chunk * kChunkSlabs < kChunkSlabs ? kNumSlabs - chunk * kChunkSlabs
                                                              : kChunkSlabs;
    }
    static_assert(kRowBytes % 32 == 0, "a tile row must be a multiple of 32 bytes");
    // 16-bit D without a D load writes staging by stmatrix (four 8x8 blocks of 16 rows x 16
    // columns per instruction; a chunk is a whole number of 16-column slabs) instead of one
    // 4-byte store per element pair: a quarter of the shared-memory store instructions. (Probe
    // builds with DG_PROBE_NO_STMATRIX keep the pair stores, for benchmarks/probe_*.py.)
    // Probe builds (DG_PROBE_C_REDUCE_ADD, benchmarks/probe_k_grouped.py): an FP8 accumulating
    // tile does not load c; its store adds the tile to D in L2 (a TMA reduce-add).
#ifdef DG_PROBE_C_REDUCE_ADD
    static constexpr bool kReduceC = kAccumulate && kWholeRowsForC;
#else
    static constexpr bool kReduceC = false;
#endif
    static constexpr bool kLoadC = kAccumulate && !kReduceC;
    // Probe builds (DG_PROBE_SERIAL_C_ADD): c added one pair at a time, load then store, the order
    // before the batched add (store()); kept for the GPU tests' bitwise comparison and for timing.
#ifdef DG_PROBE_SERIAL_C_ADD
    static constexpr bool kSerialCAdd = true;
#else
    static constexpr bool kSerialCAdd = false;
#endif
#ifdef DG_PROBE_NO_STMATRIX
    static constexpr bool kStmatrix = false;
#else
    static constexpr bool kStmatrix = OutputPair<OutT>::kSixteenBit && !kAccumulate;
#endif
    static_assert(!kStmatrix || kSlabCols % 16 == 0, "stmatrix writes 16 columns at a time");

    // Byte offset of element (row, col) of a chunk in the staging buffer: slab-major, rows of
    // kSwizzleBytes, then the TMA swizzle: address bits [4, 4 + log2(span / 16)) XOR address bits
    // [7, ...) (CU_TENSOR_MAP_SWIZZLE_32B/64B/128B). Slabs start at multiples of 2 KB, so the
    // pattern depends on the offset alone.
    __device__ __forceinline__ static uint32_t offset(uint32_t row, uint32_t col) {
        const uint32_t linear = (col / kSlabCols) * kSlabBytes + row * kSwizzleBytes +
                                (col % kSlabCols) * sizeof(OutT);
        return linear ^ (((linear >> 7) & (kSwizzleBytes / 16 - 1)) << 4);
    }

    // The warpgroup leader's TMA load of one chunk of the current D tile into staging (which the
    // previous stores must have finished reading).
    __device__ __forceinline__ static void load_chunk(uint8_t* staging, uint64_t* load_barrier,
                                                      const TmaDescriptor* tma_d, uint32_t row0,
                                                      uint32_t chunk_col0, uint32_t slabs) {
        // complete_tx counts whole boxes, out-of-bounds parts included (zero-filled).
        mbarrier_arrive_expect_tx(load_barrier, slabs * kSlabBytes);
#pragma unroll
        for (uint32_t s = 0; s < kChunkSlabs; ++s)
            if (s < slabs)
                tma_load_2d(staging + s * kSlabBytes, tma_d, load_barrier, chunk_col0 + s * kSlabCols, row0);
    }

    // kAccumulate: starts the load of the tile's first chunk of D early, for a store<true>() that
    // then only waits for it; called once per tile by every thread of the warpgroup (the leader
    // issues) at the K block early_c_load_block() names, so that the load (up to 36 KB per
    // warpgroup from HBM, waited for at the store otherwise) runs under the MMAs, after the
    // previous tile's stores finished reading staging (the leader waits for that first).
    __device__ __forceinline__ static void prefetch_accumulator(uint8_t* staging, uint64_t* load_barrier,
                                                                const TmaDescriptor* tma_d,
                                                                uint32_t row0, uint32_t col0) {
        static_assert(kAccumulate, "only an accumulating epilogue loads D");
        if (threadIdx.x % 128 == 0) {
            tma_store_wait_read_all();
            load_chunk(staging, load_barrier, tma_d, row0, col0, chunk_slabs(0));
        }
    }

    // acc: the m64nBLOCK_N wgmma fragment of this thread. row0/col0: global coordinates of the
    // warpgroup's first element. load_phase flips on every accumulate load. kFirstChunkPrefetched:
    // prefetch_accumulator() was called for this tile. kOtherBuffers: how many stores of this
    // warpgroup through other staging buffers may be newer than the last one through this buffer
    // (their reads need not finish first: a warpgroup storing several 64-row waves of a tile, one
    // buffer each; single-chunk stores only).
    template <bool kFirstChunkPrefetched = false, int kOtherBuffers = 0>
    __device__ __forceinline__ static void store(const float* acc, uint8_t* staging,
                                                 uint64_t* load_barrier, uint32_t& load_phase,
                                                 const TmaDescriptor* tma_d, uint32_t row0,
                                                 uint32_t col0, uint32_t barrier_id) {
        static_assert(kAccumulate || !kFirstChunkPrefetched, "only an accumulating epilogue loads D");
        static_assert(kOtherBuffers == 0 || (kNumChunks == 1 && !kAccumulate),
                      "stores through several buffers: one chunk each, no D load");
        const bool leader = threadIdx.x % 128 == 0;
        const uint32_t staging_addr = smem_addr(staging);

#pragma unroll
        for (uint32_t chunk = 0; chunk < kNumChunks; ++chunk) {
            const uint32_t chunk_col0 = col0 + chunk * kChunkCols;
            // A prefetched chunk is only waited for. Otherwise the previous stores (last chunk, or
            // last tile) must have finished reading staging before anything lands there.
            const bool prefetched = kFirstChunkPrefetched && chunk == 0;
            if (!prefetched) {
                if (leader)
                    tma_store_wait_read<kOtherBuffers>();
                named_barrier_sync(barrier_id, 128);
            }
            if constexpr (kLoadC) {
                if (!prefetched && leader)
                    load_chunk(staging, load_barrier, tma_d, row0, chunk_col0, chunk_slabs(chunk));
                mbarrier_wait(load_barrier, load_phase);
                load_phase ^= 1;
            }

            if constexpr (kStmatrix) {
                // Lane l gives the row address of row l % 8 of block l / 8: blocks 0-3 are
                // (rows 0-7, columns 0-7), (rows 8-15, columns 0-7), (rows 0-7, columns 8-15) and
                // (rows 8-15, columns 8-15) of the warp's 16 rows, each lane's register of a block
                // the fragment's element pair of that half and 8-column group.
                const uint32_t lane = threadIdx.x % 32, block = lane / 8;
                const uint32_t row = (threadIdx.x % 128) / 32 * 16 + (block % 2) * 8 + lane % 8;
#pragma unroll
                for (uint32_t i = 0; i < kChunkCols / 8; i += 2) {
                    // (Fixed trip counts, so that every accumulator index stays a constant.)
                    const uint32_t t = chunk * kChunkCols / 8 + i;
                    if (t >= kBlockN / 8)
                        break;
                    const uint32_t col = (t + block / 2) * 8 - chunk * kChunkCols;
                    stmatrix_x4(staging_addr + offset(row, col),
                                OutputPair<OutT>::pack(acc[t * 4], acc[t * 4 + 1]),
                                OutputPair<OutT>::pack(acc[t * 4 + 2], acc[t * 4 + 3]),
                                OutputPair<OutT>::pack(acc[t * 4 + 4], acc[t * 4 + 5]),
                                OutputPair<OutT>::pack(acc[t * 4 + 6], acc[t * 4 + 7]));
                }
            } else if constexpr (!kLoadC || kSerialCAdd) {
#pragma unroll
                for (uint32_t i = 0; i < kChunkCols / 8; ++i) {
                    const uint32_t t = chunk * kChunkCols / 8 + i;
                    if (t >= kBlockN / 8)
                        break;
#pragma unroll
                    for (uint32_t half = 0; half < 2; ++half) {
                        const uint32_t p = staging_addr + offset(fragment_row(half),
                                                                 fragment_col(t) - chunk * kChunkCols);
                        float2 v = make_float2(acc[t * 4 + half * 2], acc[t * 4 + half * 2 + 1]);
                        if constexpr (kLoadC) {
                            const float2 old = OutputPair<OutT>::load(p);
                            v.x += old.x;
                            v.y += old.y;
                        }
                        OutputPair<OutT>::store(p, v);
                    }
                }
            } else {
                // c + acc in batches of kCBatch column groups, each batch's c loaded before any
                // of its sums is stored. One load, add and store per pair in turn (the loop
                // above, which probe builds with DG_PROBE_SERIAL_C_ADD keep) left every load's
                // latency exposed: the asm statements keep their order and ptxas cannot tell a
                // store's address from the next load's, so at 128x112 a thread ran 28 dependent
                // LDS -> FADD -> STS steps. 8 column groups: 32 floats of c live at once, which
                // fit beside the accumulators without spills in every accumulating binary, 128x256
                // BF16 (128 accumulators a thread) included. Measured on one H100 (NOTES.md
                // session 34): no change beyond run-to-run noise on the k-grouped and dense 1D1D
                // shapes (the two warpgroups' epilogue loads interleave on each sub-partition);
                // kept as the form with fewer waits, the probe for an H200 comparison.
                constexpr uint32_t kCBatch = 8;
                auto pair_addr = [&](uint32_t t, uint32_t half) {
                    return staging_addr + offset(fragment_row(half), fragment_col(t) - chunk * kChunkCols);
                };
#pragma unroll
                for (uint32_t i0 = 0; i0 < kChunkCols / 8; i0 += kCBatch) {
                    const uint32_t t0 = chunk * kChunkCols / 8 + i0;
                    float2 old[kCBatch][2];
#pragma unroll
                    for (uint32_t j = 0; j < kCBatch; ++j)
                        if (i0 + j < kChunkCols / 8 && t0 + j < kBlockN / 8)
#pragma unroll
                            for (uint32_t half = 0; half < 2; ++half)
                                old[j][half] = OutputPair<OutT>::load(pair_addr(t0 + j, half));
#pragma unroll
                    for (uint32_t j = 0; j < kCBatch; ++j)
                        if (i0 + j < kChunkCols / 8 && t0 + j < kBlockN / 8)
#pragma unroll
                            for (uint32_t half = 0; half < 2; ++half) {
                                const uint32_t t = t0 + j;
                                OutputPair<OutT>::store(pair_addr(t, half),
                                                        make_float2(acc[t * 4 + half * 2] + old[j][half].x,
                                                                    acc[t * 4 + half * 2 + 1] + old[j][half].y));
                            }
                }
            }
            fence_proxy_async_shared();
            named_barrier_sync(barrier_id, 128);

            if (leader) {
#pragma unroll
                for (uint32_t s = 0; s < kChunkSlabs; ++s)
                    if (s < chunk_slabs(chunk)) {
                        if constexpr (kReduceC)
                            tma_reduce_add_2d(tma_d, staging + s * kSlabBytes, chunk_col0 + s * kSlabCols, row0);
                        else
                            tma_store_2d(tma_d, staging + s * kSlabBytes, chunk_col0 + s * kSlabCols, row0);
                    }
                tma_store_commit_group();
            }
        }
    }

    __device__ __forceinline__ static void finish() {
        if (threadIdx.x % 128 == 0)
            tma_store_wait_all();
    }
};

// Where an accumulating tile starts loading its c (prefetch_accumulator): at K block
// end - kCLoadLead (the FP8 kernel loads it before issuing that block, after promoting the one
// before; BF16's probe build after issuing it), or `end`, at the store, for tiles of at most
// kCLoadLead + 1 blocks. Measured on the FP8 1D1D wgrad tiles (2026-12-05, benchmarks/NOTES.md
// session 24): 12- and 16-block tiles 7-12 % faster than with c loaded at the store, 56-block
// tiles -0.4 to +2.9 % (the K loop stays the same code either way: the FP8 kernel runs a tile's
// K blocks in two parts around the load, which adds one or two chain ends a tile), 4-block
// tiles 4 % slower with c loaded after their first block (an H100); tiles of 5 to 11 blocks
// were not timed (the cut at 6 is a guess between 4 and 12). Longer leads (probe builds
// DG_PROBE_C_LOAD_LEAD_6/8/12) ran 0-8 % slower than 4 on the k-grouped shapes' 12-80-block
// tiles, where the c/D traffic is largest (one H100 run, session 25).
// (Constants inside functions or structs: a namespace-scope one becomes a PTX global named after
// the source file, which changed ptxas's scheduling between builds of the same kernel.)
__device__ __forceinline__ uint32_t early_c_load_block(uint32_t begin, uint32_t end) {
#if defined(DG_PROBE_C_LOAD_LEAD_6)   // probe builds (benchmarks/probe_k_grouped.py) only
    constexpr uint32_t kCLoadLead = 6;
#elif defined(DG_PROBE_C_LOAD_LEAD_8)
    constexpr uint32_t kCLoadLead = 8;
#elif defined(DG_PROBE_C_LOAD_LEAD_12)
    constexpr uint32_t kCLoadLead = 12;
#else
    constexpr uint32_t kCLoadLead = 4;
#endif
    return end - begin > kCLoadLead + 1 ? end - kCLoadLead : end;
}

// kMaxChunkSlabs for a kernel whose other shared-memory regions (its ring, barriers, flags and
// alignment slack) take `non_staging_bytes` of SM90's 227 KB: the whole slabs per 64-row slice
// that fit the rest (0: none).
template <typename OutT, uint32_t kBlockN>
__host__ __device__ constexpr uint32_t staging_room_slabs(uint32_t non_staging_bytes, uint32_t slices) {
    constexpr uint32_t kSlabBytes = SwizzledTmaStoreEpilogue<OutT, kBlockN, false>::kSlabBytes;
    return non_staging_bytes < 232448 ? (232448 - non_staging_bytes) / (slices * kSlabBytes) : 0;
}

// The rows of a warpgroup's tile that a TMA box cannot store alone: the first `rows` of its 64
// (the others must stay untouched, e.g. past a masked group's row count), stored from the
// fragment with plain global stores of two elements (4 or 8 bytes). Only the last tile of such a
// group comes here, so the poorer coalescing costs little. d points at D's element (0, 0), ld_d
// is its row stride in elements; columns at or past n are skipped, also the second of a pair at an
// odd n (D may be a column slice of a wider buffer whose next column is not ours).
template <typename OutT, uint32_t kBlockN>
struct RowLimitedStoreEpilogue {
    __device__ __forceinline__ static void store(const float* acc, OutT* d, uint32_t ld_d,
                                                 uint32_t row0, uint32_t col0, uint32_t rows,
                                                 uint32_t n) {
#pragma unroll
        for (uint32_t half = 0; half < 2; ++half) {
            const uint32_t row = fragment_row(half);
            if (row >= rows)
                continue;
            OutT* d_row = d + static_cast<uint64_t>(row0 + row) * ld_d;
#pragma unroll
            for (uint32_t t = 0; t < kBlockN / 8; ++t) {
                const uint32_t col = col0 + fragment_col(t);
                if (col + 1 < n)
                    store_pair(d_row + col, acc[t * 4 + half * 2], acc[t * 4 + half * 2 + 1]);
                else if (col < n)
                    store_one(d_row + col, acc[t * 4 + half * 2]);
            }
        }
    }

    __device__ __forceinline__ static void store_pair(float* p, float x, float y) {
        *reinterpret_cast<float2*>(p) = make_float2(x, y);
    }
    __device__ __forceinline__ static void store_pair(__nv_bfloat16* p, float x, float y) {
        *reinterpret_cast<__nv_bfloat162*>(p) = __float22bfloat162_rn(make_float2(x, y));
    }
    __device__ __forceinline__ static void store_one(float* p, float x) { *p = x; }
    __device__ __forceinline__ static void store_one(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
};

// The M-grouped GEMMs' store of one warpgroup's 64 tile rows (bf16_gemm.cuh, fp8_gemm.cuh): rows
// that keep no product (keep_row, per fragment half) become zeros; then a warpgroup whose 64 rows
// are all stored goes through the TMA-store epilogue, one with fewer (the last tile of a masked
// group, the end of a psum layout) through RowLimitedStoreEpilogue, because a TMA box cannot leave
// rows inside the tensor unwritten. row0: the warpgroup's first row of D; rows_written: the
// unit's stored rows from the tile's first; row_slice: which 64 of the tile's rows the warpgroup
// holds (its index, but 0 for both warpgroups of a column-split FP8 tile); math_wg names its
// barrier.
template <class Epilogue, typename OutT, uint32_t kBlockN>
__device__ __forceinline__ void store_grouped_rows(float* acc, const bool (&keep_row)[2],
                                                   uint32_t rows_written, uint32_t row_slice,
                                                   uint32_t math_wg,
                                                   uint32_t row0, uint32_t col0, uint8_t* staging,
                                                   uint64_t* load_barrier, uint32_t& load_phase,
                                                   const TmaDescriptor* tma_d, OutT* d, uint32_t ld_d,
                                                   uint32_t n) {
#pragma unroll
    for (uint32_t t = 0; t < kBlockN / 8; ++t)
#pragma unroll
        for (uint32_t half = 0; half < 2; ++half)
#pragma unroll
            for (uint32_t j = 0; j < 2; ++j)
                acc[t * 4 + half * 2 + j] = keep_row[half] ? acc[t * 4 + half * 2 + j] : 0.0f;
    const uint32_t rows = rows_written > row_slice * 64 ? min(rows_written - row_slice * 64, 64u) : 0u;
    if (rows == 64) {
        Epilogue::store(acc, staging, load_barrier, load_phase, tma_d, row0, col0,
                        /*barrier_id=*/1 + math_wg);
    } else if (rows > 0) {
        RowLimitedStoreEpilogue<OutT, kBlockN>::store(acc, d, ld_d, row0, col0, rows, n);
    }
}

}  // namespace dg::sm90
