// SM90 FP8 GEMM with fine-grained scaling: D[M,N] (+)= dequant(A)[M,K] @ dequant(B)[N,K]^T.
//
// A and B are E4M3, K-major (8-bit wgmma has no transpose bits). A has one FP32 scale per row
// per 128 of K (sfa, the TMA-aligned MN-major layout of API.md 2.3); B has one per 128x128
// block ("1D2D", BF16 D) or one per column per 128 of K ("1D1D", FP32 D, optional accumulation).
//
// Two-level accumulation, the reason FP8 stays accurate: the four m64nNk32 wgmmas of a 128-wide K
// block accumulate raw products into `partial` (the tensor core's FP32 accumulation of 8-bit
// products loses low bits over long K); after each K block the consumer scales `partial` by
// sfa[row] * sfb[col] and adds it to `acc` with ordinary FP32 FMAs. So a block's wgmmas are
// waited for before it is promoted.
//
// The K loop is kept lean (scales arrive by TMA with the stage, accumulators start at zero, the
// 1D2D scale block of each column group is a compile-time fact, the warpgroup index is
// warp-uniform): the first version issued ~400 instructions per K block per warp at block N 192
// and ran every M=4096 shape at ~720 TFLOPS on the H200, the lean loop ~1000-1150 (2026-12-01,
// benchmarks/NOTES.md). Then the tensor core idled while both warpgroups promoted (Nsight Compute:
// 66 % tensor-busy against cuBLAS's 77 % with the same 128x128 tile), so tiles whose registers
// allow keep two partial sets and issue block i + 1 before promoting block i (kOverlapPromotion,
// in chains of kPromotionChain blocks): 128x128 went from ~212 to ~197 us at 4096x4096x7168.
// Taking turns between the two warpgroups (ping-pong) gained nothing and was not kept.
// 256-row tiles (1D2D, BF16 D) give each warpgroup two 64-row waves per K block (kRowWaves);
// per clock they are the fastest tiles measured, but they ran ahead of 128x128 only at short K
// (tuned entries, 2026-12-02). Column-split tiles (kSplitColumns, M-grouped only) give 64 rows to
// both warpgroups, each on one column half, for the masked layout's row granularity: 64x256
// is chosen for groups of a few 64-row units, where it measured 3-4 % faster than 128x128
// (heuristics.sm90.SPLIT_COLUMNS_ROWS; benchmarks/NOTES.md, sessions 31-32).
// The k-grouped GEMM staggers its two warpgroups (kStaggerBlocks: the second starts its first tile
// two K blocks late), so that one's FP32 c-add epilogue runs under the other's wgmmas (session 33).
//
// The pipeline (TMA producer warp, stage ring, persistent scheduler, optional 2-CTA multicast)
// is gemm_pipeline.cuh's, with each stage's scales as extra TMA loads (ScaleTileLoads); the
// epilogue is SwizzledTmaStoreEpilogue, or SplitKEpilogue when K is split (small M). The 1D2D B
// scales (one to three per K block and tile) are plain global loads one K block ahead.
#pragma once

#include <cuda_bf16.h>
#include "../common/types.cuh"

#include "../common/ptx.cuh"
#include "epilogue.cuh"
#include "gemm_pipeline.cuh"
#include "scheduler_grouped.cuh"
#include "splitk_epilogue.cuh"
#include "wgmma.cuh"
#include "wgmma_fp8.cuh"

namespace dg::sm90 {

template <uint32_t kBlockM_, uint32_t kBlockN_, uint32_t kNumStages_, bool kScaleBPerColumn_,
          typename OutT_, bool kAccumulate_, bool kSplitK_, uint32_t kGroupM_, uint32_t kClusterM_,
          uint32_t kClusterN_, uint32_t kShapeM_, uint32_t kShapeN_, uint32_t kShapeK_,
          bool kStreamK_ = false, bool kSplitColumns_ = false, uint32_t kStaggerBlocks_ = 0>
struct Fp8GemmTraits {
    static constexpr uint32_t kBlockM = kBlockM_, kBlockN = kBlockN_, kNumStages = kNumStages_;
    // false: "1D2D", one sfb per 128x128 block of B; true: "1D1D", one per column per 128 of K.
    static constexpr bool kScaleBPerColumn = kScaleBPerColumn_;
    static constexpr bool kAccumulate = kAccumulate_;
    // Split-K: K-slices of a tile on several CTAs, reduced by SplitKEpilogue (small M, where the
    // tiles alone leave SMs idle; num_splits at run time).
    static constexpr bool kSplitK = kSplitK_;
    // Stream-K for the last wave (StreamKTileScheduler): whole tiles go through the TMA-store
    // epilogue, tiles split between CTAs through SplitKEpilogue (as bf16_gemm.cuh).
    static constexpr bool kStreamK = kStreamK_;
    static constexpr bool kAKMajor = true, kBKMajor = true;
    static constexpr uint32_t kGroupM = kGroupM_;
    static constexpr uint32_t kClusterM = kClusterM_, kClusterN = kClusterN_;
    static constexpr uint32_t kClusterSize = kClusterM * kClusterN;
    static constexpr uint32_t kShapeM = kShapeM_, kShapeN = kShapeN_, kShapeK = kShapeK_;
    using OutT = OutT_;

    static constexpr uint32_t kBlockK = 128;   // 128 bytes of E4M3: one 128B-swizzle row,
                                               // and exactly one scale group
    static constexpr uint32_t kAtom = 128;     // (MN-major atoms: unused, both operands K-major)
    static constexpr uint32_t kScaleGroup = 128;
    // Consumer warpgroups: one per 64 rows, at most two. A 256-row tile (1D2D, BF16 D) gives
    // each of the two warpgroups two row waves of 64: per K block a warpgroup issues and
    // promotes its waves one after the other (one partial set, one accumulator set per wave),
    // while the other warpgroup's wgmmas keep the tensor core busy. Against 128-row tiles it
    // reads each B tile for twice the rows: a quarter fewer shared-memory and L2 bytes per FLOP.
    // kSplitColumns (64-row tiles of the M-grouped GEMMs): the two warpgroups take the tile's
    // two column halves instead, each m64n(BLOCK_N/2) per K block, the work of a 128-row tile's
    // warpgroup. A masked group then rounds its rows up to 64, not 128, without leaving a
    // warpgroup idle (a 64-row tile with one warpgroup cannot keep the tensor core busy).
    static constexpr bool kSplitColumns = kSplitColumns_;
    // Staggered warpgroups (consume_fp8): warpgroup 1 starts its first tile once warpgroup 0 has
    // promoted that tile's first kStaggerBlocks K blocks (0: together). The k-grouped FP8 GEMM
    // takes 2 (its tiles are short and end in an FP32 c load and store); the probe builds
    // DG_PROBE_STAGGER_<d> / DG_PROBE_NO_STAGGER override it (gemm_pipeline.cuh stagger_blocks;
    // DG_PROBE_STAGGER_EVERY_TILE: gate every tile, not just the first).
    static constexpr uint32_t kStaggerBlocks = stagger_blocks(kStaggerBlocks_);
    static constexpr uint32_t kNumRowSlices = kBlockM / 64;
    static constexpr uint32_t kNumMathWarpgroups =
        kSplitColumns ? 2 : kNumRowSlices < 2 ? kNumRowSlices : 2;
    static constexpr uint32_t kRowWaves = kSplitColumns ? 1 : kNumRowSlices / kNumMathWarpgroups;
    // The columns one warpgroup computes, and its 64-row staging slices (one per warpgroup and
    // row wave).
    static constexpr uint32_t kWarpgroupN = kSplitColumns ? kBlockN / 2 : kBlockN;
    static constexpr uint32_t kNumStagingSlices = kNumMathWarpgroups * kRowWaves;
    static constexpr uint32_t kNumThreads = 128 * (1 + kNumMathWarpgroups);

    static constexpr uint32_t kTileABytes = kBlockM * kBlockK;
    static constexpr uint32_t kTileBBytes = kBlockN * kBlockK;
    // Each stage also brings the K block's scales by TMA: sfa of the tile's rows, and in 1D1D sfb
    // of its columns (FP32 rows of the MN-major scale tensors; out-of-bounds rows read as 0). The
    // consumers read them from shared memory: no global loads, address math or bounds checks in
    // the K loop. Each box lands 128-byte aligned (TMA's destination alignment).
    static constexpr uint32_t kScaleABytes = kBlockM * 4;
    static constexpr uint32_t kScaleBBytes = kScaleBPerColumn ? (kBlockN * 4 + 127) / 128 * 128 : 0;
    static constexpr uint32_t kScaleStageBytes = kScaleABytes + kScaleBBytes;
    static constexpr uint32_t kStageBytes =
        kTileABytes + kTileBBytes + kScaleABytes + (kScaleBPerColumn ? kBlockN * 4 : 0);

    // Barriers: full and empty per stage, one epilogue load barrier per consumer warpgroup.
    static constexpr uint32_t kNumBarriers = 2 * kNumStages + kNumMathWarpgroups;
    // The epilogue stages what shared memory the ring leaves (at least its default chunks, unless
    // the ring is deeper than those allow: SwizzledTmaStoreEpilogue's kMaxChunkSlabs).
    static constexpr uint32_t kNonStagingBytes =
        kNumStages * (kTileABytes + kTileBBytes + kScaleStageBytes) + kNumBarriers * 8 +
        kNumMathWarpgroups * 4 + 1024;
    using Epilogue = SwizzledTmaStoreEpilogue<
        OutT, kWarpgroupN, kAccumulate,
        kSplitK ? 0xffffffffu
                : staging_room_slabs<OutT, kWarpgroupN>(kNonStagingBytes, kNumStagingSlices),
        /*kWholeRowsForC=*/true>;
    using SplitEpilogue = SplitKEpilogue<OutT, kBlockN, kNumMathWarpgroups, kAccumulate>;
    using Mma = WgmmaFp8<kWarpgroupN>;


    // 1D2D: how many 128-column scale blocks of B a warpgroup's columns can overlap. They start at
    // multiples of kWarpgroupN (tiles at multiples of BLOCK_N), so their offset inside the first
    // scale block is a multiple of gcd(kWarpgroupN, 128).
    static constexpr uint32_t kScaleAlign = (kWarpgroupN % 128 == 0) ? 128
                                          : (kWarpgroupN % 64 == 0) ? 64
                                          : (kWarpgroupN % 32 == 0) ? 32 : 16;
    static constexpr uint32_t kScaleBlocksPerTile =
        (kScaleGroup - kScaleAlign + kWarpgroupN - 1) / kScaleGroup + 1;

    // Whether a second set of partial sums lets one K block's wgmmas run under the previous
    // block's promotion: acc plus two partial sets (3 x kWarpgroupN / 2 FP32) plus the block's
    // scales must stay within 200 registers (an empirical bound: what compiled without spills
    // under kConsumerRegisters, checked by the compile tests), and a
    // 1D2D tile must sit in one scale block (with several tile offsets, 64x96 ran out of
    // registers for the wgmma pipeline: ptxas C7511).
    static constexpr uint32_t kNumScaleRegisters = kScaleBPerColumn ? kWarpgroupN / 4 + 2 : 4;
    static constexpr bool kOverlapPromotion = 3 * kWarpgroupN / 2 + kNumScaleRegisters <= 200 &&
                                              (kScaleBPerColumn || kScaleBlocksPerTile == 1) &&
                                              kRowWaves == 1
#ifdef DG_PROBE_NO_PROMOTION_OVERLAP   // probe builds (benchmarks/probe_fp8.py) only
                                              && false
#endif
        ;
    static constexpr uint32_t kNumPartials = kOverlapPromotion ? 2 : 1;
    // K blocks per overlapped chain (consume_fp8): all but the chain's last promotion overlap
    // the next block's wgmmas. Measured on the H200 (2026-12-01, 128x128, four M=4096 shapes):
    // chains of 8 ran 3-5 % faster than chains of 4, 2 slower than 4, no overlap 6-10 % slower.
#if defined(DG_PROBE_PROMOTION_CHAIN_16)
    static constexpr uint32_t kPromotionChain = 16;
#elif defined(DG_PROBE_PROMOTION_CHAIN_4)
    static constexpr uint32_t kPromotionChain = 4;
#else
    static constexpr uint32_t kPromotionChain = 8;
#endif

    // Shared-memory plan (read by SharedPlan): stages, epilogue staging, the stages' scales
    // (after the staging, which must stay 1024-aligned for its swizzle), barriers. Mirrored by
    // heuristics.sm90.fp8_gemm_shared_memory.
    static constexpr uint32_t kOffsetA = 0;
    static constexpr uint32_t kOffsetB = kOffsetA + kNumStages * kTileABytes;
    static constexpr uint32_t kOffsetStaging = kOffsetB + kNumStages * kTileBBytes;
    static constexpr uint32_t kOffsetScales =
        kOffsetStaging + (kSplitK ? 0 : kNumStagingSlices * Epilogue::kBytesPerWarpgroup);
    static constexpr uint32_t kOffsetBarriers = kOffsetScales + kNumStages * kScaleStageBytes;
    static constexpr uint32_t kOffsetFlags = kOffsetBarriers + kNumBarriers * 8;  // split-K "last" flags
    static constexpr uint32_t kSmemBytes = kOffsetFlags + kNumMathWarpgroups * 4 + 1024;  // + align

    // Registers: each consumer thread holds kRowWaves accumulator sets and one or
    // (kOverlapPromotion) two partial sets, each kWarpgroupN/2 FP32 values.
    // Two consumer warpgroups leave the producer 40 (128 x 40 + 256 x 232 <= 64K registers); with
    // one there is room for more, which the masked scheduler's producer needs with K compiled in
    // as 2048 and 8 stages (at 40 it spilled 160 B, tests/test_compile_sm90_grouped.py).
    static constexpr uint32_t kProducerRegisters = kNumMathWarpgroups == 1 ? 64 : 40;
    static constexpr uint32_t kConsumerRegisters = kNumMathWarpgroups == 1 ? 240 : 232;

    static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 256,
                  "block M is 64, 128 (one or two consumer warpgroups) or 256 (two row waves each)");
    static_assert(kRowWaves == 1 || (!kScaleBPerColumn && !kAccumulate && !kSplitK &&
                                     kClusterSize == 1 && kBlockN <= 128 && Epilogue::kNumChunks == 1),
                  "256-row tiles: 1D2D, no split-K or cluster, block N <= 128 (registers: "
                  "two accumulator sets and a partial set)");
    static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "block N is a multiple of 16 up to 256");
    static_assert(!kSplitColumns || (kBlockM == 64 && kBlockN % 32 == 0 && !kScaleBPerColumn &&
                                     !kAccumulate && !kSplitK && !kStreamK && kClusterSize == 1),
                  "column-split tiles: 64 rows, halves of a multiple of 16 columns, 1D2D, no "
                  "split-K, stream-K or cluster");
    static_assert(kClusterSize == 1 || kClusterSize == 2, "clusters of 1 or 2 CTAs, along M or N");
    static_assert(!kStreamK || (!kSplitK && kClusterSize == 1 && kRowWaves == 1),
                  "stream-K: no split-K, no clusters, no 256-row tiles");
    static_assert(!kAccumulate || kScaleBPerColumn, "accumulation into D is the 1D1D (wgrad) recipe");
    static_assert(kTileABytes % 1024 == 0 && kTileBBytes % 1024 == 0, "tiles must stay 1024-aligned");
    static_assert(kSmemBytes <= 232448, "shared memory plan exceeds the SM90 limit (227 KB)");
};

// Scale-factor arguments. The tensor maps tma_sfa (rows: K blocks, columns: M) and, for 1D1D,
// tma_sfb (rows: K blocks, columns: N) give the stages their scales; 1D2D sfb is read from global
// memory: element (n_block, k_block) at n_block * ld_sfb + k_block (row-major, ceil(N/128) rows).
// head_*: fp8_gemm_nt_skip_head_mid's (left, mid, right) column split, or all zero.
// sfb_group_stride: floats between groups' 1D2D sfb (M-grouped GEMMs: sfb [G, ceil(N/128), .]).
struct Fp8ScaleArguments {
    const float* sfb;
    uint32_t ld_sfb;
    uint32_t head_left, head_mid, head_right;
    uint32_t sfb_group_stride;
};

// The group of a unit (0 for the dense scheduler's units).
__device__ __forceinline__ uint32_t unit_group(const WorkUnit&) { return 0; }
__device__ __forceinline__ uint32_t unit_group(const GroupedWorkUnit& unit) { return unit.group; }
// Where a unit's K block 0 sits in the scale descriptors' K blocks: 0, but for a k-grouped unit
// its group's first K block (scheduler_k_grouped.cuh).
__device__ __forceinline__ uint32_t scale_k_block_origin(const WorkUnit&) { return 0; }

// Split-K and stream-K arguments: as the BF16 kernel's SplitKArguments (bf16_gemm.cuh).
struct Fp8SplitArguments {
    uint32_t num_splits;
    float* workspace;
    uint32_t* counters;
    void* d;
    uint32_t ld_d;
};

// Loads a stage's scales (gemm_pipeline.cuh's produce() calls this after the operand tiles).
// sfa's descriptor sees [rows: K blocks][columns: M] - and for the masked grouped GEMM
// [rows: G x K blocks][columns: max_m], each group's K blocks after the previous group's
// (sfa_group_rows = K blocks per group there, 0 otherwise).
template <class T>
struct ScaleTileLoads {
    const TmaDescriptor* tma_sfa;
    const TmaDescriptor* tma_sfb;
    uint8_t* scales;   // the stages' scale region
    uint32_t sfa_group_rows;

    template <class Unit>
    __device__ __forceinline__ void operator()(uint32_t stage, uint64_t* full, const Unit& unit,
                                               uint32_t k_block) const {
        uint8_t* slot = scales + stage * T::kScaleStageBytes;
        const uint32_t scale_k_block = scale_k_block_origin(unit) + k_block;
        tma_load_2d(slot, tma_sfa, full, unit.m_block * T::kBlockM,
                    unit_group(unit) * sfa_group_rows + scale_k_block);
        if constexpr (T::kScaleBPerColumn)
            tma_load_2d(slot + T::kScaleABytes, tma_sfb, full, unit.n_block * T::kBlockN, scale_k_block);
    }
};

__device__ __forceinline__ float ld_shared_f32(uint32_t addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
    return v;
}

__device__ __forceinline__ float2 ld_shared_f32x2(uint32_t addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
    return v;
}

// This thread's scales for one K block: A's for its two fragment rows, B's for the tile's scale
// blocks (1D2D) or for its fragment columns (1D1D). Cost probes of the 1D1D promotion
// (benchmarks/probe_1d1d_cost.py only; each is right only for inputs whose omitted scales are all
// 1): DG_PROBE_1D1D_SCALE_A_ONLY promotes with sfa alone (one FFMA an element, no sfb loads, as
// 1D2D), DG_PROBE_1D1D_SCALE_B_ONLY with sfb alone (one FFMA an element, the sfb loads kept),
// DG_PROBE_1D1D_NO_SCALES adds the partial sums unscaled (Promotion::promote).
template <class T>
struct BlockScales {
    static constexpr uint32_t kNumB =
        T::kScaleBPerColumn ? T::kWarpgroupN / 4 : T::kScaleBlocksPerTile;
    float a[T::kRowWaves][2];   // per row wave, the thread's two fragment rows
    float b[kNumB];

    // This thread's byte offsets in a stage's scale slot: its first fragment row's sfa (the
    // second is 8 rows on, the next row wave's 64) and its first fragment column's sfb (the
    // others are 8t columns on).
    struct SlotOffsets {
        uint32_t a, b;
        __device__ __forceinline__ explicit SlotOffsets(uint32_t row_slice)
            : a((row_slice * T::kRowWaves * 64 + fragment_row(0)) * 4),
              b(T::kScaleABytes + fragment_col(0) * 4) {}
    };

    // From the stage's scale slot (sfa, and 1D1D sfb), read while the stage is still held.
    __device__ __forceinline__ void read_stage(uint32_t slot, const SlotOffsets& offsets) {
#pragma unroll
        for (uint32_t wave = 0; wave < T::kRowWaves; ++wave)
#pragma unroll
            for (uint32_t half = 0; half < 2; ++half)
                a[wave][half] = ld_shared_f32(slot + offsets.a + (wave * 64 + half * 8) * 4);
#if !defined(DG_PROBE_1D1D_SCALE_A_ONLY) && !defined(DG_PROBE_1D1D_NO_SCALES)
        if constexpr (T::kScaleBPerColumn) {
#pragma unroll
            for (uint32_t t = 0; t < T::kWarpgroupN / 8; ++t) {
                const float2 pair = ld_shared_f32x2(slot + offsets.b + t * 8 * 4);
                b[2 * t] = pair.x;
                b[2 * t + 1] = pair.y;
            }
        }
#endif
    }
};

// 1D2D: the tile's B scale blocks, one pointer per block the tile overlaps (clamped to the last
// block of B: a block past it only scales columns >= N, which the store clips), each moved one K
// block on per load, loaded one K block ahead of use: a uniform load per block and warp, its L2
// latency hidden behind a K block's MMAs.
template <class T>
struct BlockScalesB1d2d {
    static constexpr uint32_t kNumB = T::kScaleBlocksPerTile;
    const float* rows[kNumB];

    __device__ __forceinline__ BlockScalesB1d2d(const Fp8ScaleArguments& args, uint32_t n0, uint32_t n,
                                                uint32_t k_block, uint32_t group) {
        const uint32_t last = (n + T::kScaleGroup - 1) / T::kScaleGroup - 1;
        const float* sfb = args.sfb + static_cast<uint64_t>(group) * args.sfb_group_stride;
#pragma unroll
        for (uint32_t j = 0; j < kNumB; ++j)
            rows[j] = sfb + static_cast<uint64_t>(min(n0 / T::kScaleGroup + j, last)) * args.ld_sfb
                      + k_block;
    }
    // The scales of the next K block in order.
    __device__ __forceinline__ void load_next(float (&b)[kNumB]) {
#pragma unroll
        for (uint32_t j = 0; j < kNumB; ++j)
            b[j] = __ldg(rows[j]++);
    }
};

// The scales one K block's promotion uses, taken in K-block order: sfa (and 1D1D sfb) from the
// block's stage, and for 1D2D the sfb loaded one block earlier, whose successor is loaded now.
template <class T>
struct KBlockScales {
    BlockScales<T> current;
    float next_b[BlockScales<T>::kNumB];

    __device__ __forceinline__ void take(uint32_t slot, const typename BlockScales<T>::SlotOffsets& offsets,
                                         BlockScalesB1d2d<T>& b_rows, bool last) {
        current.read_stage(slot, offsets);
        if constexpr (!T::kScaleBPerColumn) {
#pragma unroll
            for (uint32_t j = 0; j < BlockScales<T>::kNumB; ++j)
                current.b[j] = next_b[j];
            if (!last)
                b_rows.load_next(next_b);
        }
    }
};

// A compile-time chain length for consume_fp8's generic lambda (C++17: no template lambdas).
template <uint32_t kLength>
struct ChainLength {
    static constexpr uint32_t value = kLength;
};

// The promotion of one K block's partial sums into the accumulators.
template <class T>
struct Promotion {
    static constexpr uint32_t kNumB = BlockScales<T>::kNumB;
    using Scales = BlockScales<T>;

    // acc += partial * sfa[row] * sfb[col]: one FFMA per element (acc starts each tile at zero).
    // The promotion runs once per K block in every consumer thread, and the issue slots of the
    // SM's schedulers, not the tensor core, were the limit (the first version, with a select of
    // the scale per column group and an FMUL path for a tile's first block, issued ~400
    // instructions per K block per warp at block N 192): so the 1D2D scale block of each column
    // group is a compile-time fact, by one instantiation per offset of the tile inside its first
    // scale block (promote_1d2d), chosen once per K block.
    __device__ __forceinline__ static void promote(float* acc, const float* partial, uint32_t n0,
                                                   const Scales& scales, uint32_t wave = 0) {
        const float* a = scales.a[wave];
        const float* b = scales.b;
        if constexpr (T::kScaleBPerColumn) {
#pragma unroll
            for (uint32_t t = 0; t < T::kWarpgroupN / 8; ++t)
#pragma unroll
                for (uint32_t half = 0; half < 2; ++half) {
                    const uint32_t r = t * 4 + half * 2;
#if defined(DG_PROBE_1D1D_NO_SCALES)
                    acc[r] += partial[r];
                    acc[r + 1] += partial[r + 1];
#elif defined(DG_PROBE_1D1D_SCALE_A_ONLY)
                    acc[r] = fmaf(partial[r], a[half], acc[r]);
                    acc[r + 1] = fmaf(partial[r + 1], a[half], acc[r + 1]);
#elif defined(DG_PROBE_1D1D_SCALE_B_ONLY)
                    acc[r] = fmaf(partial[r], b[2 * t], acc[r]);
                    acc[r + 1] = fmaf(partial[r + 1], b[2 * t + 1], acc[r + 1]);
#else
                    acc[r] = fmaf(partial[r], a[half] * b[2 * t], acc[r]);
                    acc[r + 1] = fmaf(partial[r + 1], a[half] * b[2 * t + 1], acc[r + 1]);
#endif
                }
        } else {
            float scale[2][kNumB];
#pragma unroll
            for (uint32_t half = 0; half < 2; ++half)
#pragma unroll
                for (uint32_t j = 0; j < kNumB; ++j)
                    scale[half][j] = a[half] * b[j];
            promote_1d2d_dispatch<0>((n0 % T::kScaleGroup) / T::kScaleAlign, acc, partial, scale);
        }
    }

    // Tiles start at multiples of kScaleAlign inside a 128-column scale block: one variant per
    // possible offset, or a single one when a tile never straddles two scale blocks.
    static constexpr uint32_t kNumOffsets = kNumB == 1 ? 1 : T::kScaleGroup / T::kScaleAlign;

    template <uint32_t kOffset>
    __device__ __forceinline__ static void promote_1d2d(float* acc, const float* partial,
                                                        const float (&scale)[2][kNumB]) {
        constexpr uint32_t kStart = kOffset * T::kScaleAlign;   // tile column 0 in its scale block
#pragma unroll
        for (uint32_t t = 0; t < T::kWarpgroupN / 8; ++t) {
            // An 8-column group never straddles a scale block (kStart and 8t are multiples of 8).
            const uint32_t j = kNumB == 1 ? 0 : (kStart + t * 8) / T::kScaleGroup;
#pragma unroll
            for (uint32_t half = 0; half < 2; ++half) {
                const uint32_t r = t * 4 + half * 2;
                acc[r] = fmaf(partial[r], scale[half][j], acc[r]);
                acc[r + 1] = fmaf(partial[r + 1], scale[half][j], acc[r + 1]);
            }
        }
    }

    template <uint32_t kOffset>
    __device__ __forceinline__ static void promote_1d2d_dispatch(uint32_t offset, float* acc,
                                                                 const float* partial,
                                                                 const float (&scale)[2][kNumB]) {
        if constexpr (kOffset + 1 < kNumOffsets) {
            if (offset != kOffset) {
                promote_1d2d_dispatch<kOffset + 1>(offset, acc, partial, scale);
                return;
            }
        }
        promote_1d2d<kOffset>(acc, partial, scale);
    }
};

// Column of the physical D where logical column `col` lands (fp8_gemm_nt_skip_head_mid, API.md
// 3.3): each head's `left` and `right` columns are written, its `mid` columns skipped. The host
// picks BLOCK_N dividing left and right, so a tile never straddles a gap.
__device__ __forceinline__ uint32_t skip_head_mid_column(uint32_t col, const Fp8ScaleArguments& args) {
    if (args.head_mid == 0)
        return col;
    return col + (col + args.head_right) / (args.head_left + args.head_right) * args.head_mid;
}

// ---- consumers: four m64n(kWarpgroupN)k32 wgmmas per K block, promotion, then the epilogue ----
// `Sched` is Scheduler<T> or an M-grouped scheduler (scheduler_grouped.cuh), as in bf16_gemm.cuh:
// a grouped unit may have no K blocks (a padding tile, stored as zeros), says which of its rows
// keep the product and how many are stored (a warpgroup with fewer than 64 stores them with plain
// global stores), and takes its 1D2D B scales from its group.
template <class T, class Sched>
__device__ __forceinline__ void consume_fp8(Sched scheduler, const SharedPlan<T>& plan,
                                            const TmaDescriptor& tma_d,
                                            const Fp8ScaleArguments& scales,
                                            const Fp8SplitArguments& split, uint32_t m, uint32_t n,
                                            uint32_t math_wg, uint32_t cluster_rank) {
    static_assert(!Sched::kGrouped || (!T::kSplitK && !T::kAccumulate && T::kClusterSize == 1 &&
                                       !T::kScaleBPerColumn && T::kRowWaves == 1),
                  "M-grouped FP8: 1D2D, no split-K, no accumulation, no clusters, block M <= 128");
    static_assert(!T::kSplitColumns || Sched::kGrouped, "column-split tiles: M-grouped GEMMs only");
    setmaxnreg_inc<T::kConsumerRegisters>();
    float acc[T::kRowWaves][T::kWarpgroupN / 2];
    float partial[T::kNumPartials][T::kWarpgroupN / 2];
    // Stage ring positions: the next K block to issue, and the oldest issued one not yet promoted
    // (one behind when promotion overlaps the next block's wgmmas).
    PipelineState pipe, done;
    uint32_t epilogue_phase = 0;
    // K-major 128B-swizzled rows: a k32 step of E4M3 moves 32 bytes along the row.
    constexpr uint32_t kStep = 32;
    // Whether an accumulating tile loads its c under the K loop (at early_c_load_block), rather
    // than at its store. DG_PROBE_LATE_C_LOAD: at the store (benchmarks/probe_fp8.py).
#if defined(DG_PROBE_LATE_C_LOAD) || defined(DG_PROBE_C_REDUCE_ADD)
    constexpr bool kEarlyCLoad = false;
#else
    constexpr bool kEarlyCLoad = T::kAccumulate && !T::kSplitK && !T::kStreamK;
#endif
    // Probe (DG_PROBE_WAVE_TURNS, 256-row tiles): the two warpgroups issue their row waves in
    // strict turns (named barriers 3 and 4), so one promotes while the other's wave runs instead
    // of both waiting for waves issued at the same moment. Measured 0-3 % slower at 256x128,
    // 10-20 % at 256x64 (benchmarks/NOTES.md, session 17): the waves already interleave.
#ifdef DG_PROBE_WAVE_TURNS
    constexpr bool kWaveTurns = T::kRowWaves > 1;
#else
    constexpr bool kWaveTurns = false;
#endif
    [[maybe_unused]] bool first_turn = math_wg == 0;
    // Staggered warpgroups (T::kStaggerBlocks = d > 0): warpgroup 1 starts its first tile only
    // once warpgroup 0 has promoted that tile's first d K blocks (named barrier 5), so the two
    // reach their epilogues apart and one's epilogue runs under the other's wgmmas instead of
    // both leaving the tensor core idle at once. After that the lead is left to itself: the
    // warpgroup alone in its K loop runs at up to twice its shared rate while the other stores,
    // and warpgroup 0 can run at most the ring's depth ahead. Measured on H100s (2026-12-07,
    // NOTES.md session 33) on the k-grouped FP8 shapes, d = 2: 0 to +4.9 % speed on all six;
    // gating every tile (probe DG_PROBE_STAGGER_EVERY_TILE, barrier 6 acknowledging, so that a
    // tile of fewer than d blocks cannot let warpgroup 0 arrive twice on barrier 5 before
    // warpgroup 1 has waited once) -3.5 to +5.0 %. Gating every tile of the 1D2D grouped and
    // dense tiles, the dense 1D1D and the BF16 kernel ran at 0.74-1.01x their speed. The first-
    // tile form (H100, session 35): dense 1D2D 128x128 +1.0 / +3.1 % at K = 7168 / 16384 but
    // -5.8 / -9.0 % at K = 2048 / 1536; BF16 128x256 and narrower no gain (geomean vs cuBLAS 0.999
    // at d = 2, 0.997 at d = 1, against 1.006).
    constexpr uint32_t kStaggerBlocks = T::kStaggerBlocks;
    constexpr bool kStagger = kStaggerBlocks > 0 && T::kNumMathWarpgroups == 2 && !T::kSplitK &&
                              !T::kStreamK && T::kRowWaves == 1;
    static_assert(!kStagger || kStaggerBlocks < T::kNumStages, "warpgroup 0 cannot lead by the whole ring");
    constexpr bool kGateEveryTile = stagger_every_tile();
    [[maybe_unused]] bool first_unit = true;
    // The warpgroup's 64-row slice of the tile (0 for both with kSplitColumns) and its first
    // column in the tile (the second half's for warpgroup 1 with kSplitColumns).
    const uint32_t row_slice = T::kSplitColumns ? 0 : math_wg;
    const uint32_t col_offset = T::kSplitColumns ? math_wg * T::kWarpgroupN : 0;
    // This warpgroup's rows of A (kRowWaves slices of 64 rows of 128 B) and of B (kWarpgroupN
    // rows of 128 B: whole 8-row swizzle atoms, as kWarpgroupN is a multiple of 16).
    const uint64_t desc_a0 =
        smem_descriptor_sw128(smem_addr(plan.tiles_a) + row_slice * T::kRowWaves * 64 * 128, 16);
    const uint64_t desc_b0 = smem_descriptor_sw128(smem_addr(plan.tiles_b) + col_offset * 128, 16);

    const uint32_t scale_slots = smem_addr(plan.tiles_a + (T::kOffsetScales - T::kOffsetA));
    const typename BlockScales<T>::SlotOffsets slot_offsets(row_slice);

    // Issues the next K block's four wgmmas of row wave `wave` into `block_partial` and commits
    // (the first wave waits for the stage; the last moves on to the next stage).
    auto issue = [&](float* block_partial, uint32_t wave = 0) {
        if (wave == 0)
            mbarrier_wait(&plan.full[pipe.stage], pipe.phase);
        // Descriptors differ from stage 0's only in the start-address field (address / 16,
        // 14 bits: no carry below 256 KB), so they are offsets of two precomputed ones.
        const uint64_t stage_a = desc_a0 + ((pipe.stage * T::kTileABytes + wave * 64 * 128) >> 4);
        const uint64_t stage_b = desc_b0 + ((pipe.stage * T::kTileBBytes) >> 4);
        if constexpr (kWaveTurns) {
            if (!first_turn)
                named_barrier_sync(3 + math_wg, 256);
            first_turn = false;
        }
        wgmma_fence_operands<T::kWarpgroupN / 2>(block_partial);
        wgmma_fence();
#pragma unroll
        for (uint32_t ks = 0; ks < T::kBlockK / 32; ++ks)
            T::Mma::mma(stage_a + ks * kStep / 16, stage_b + ks * kStep / 16, block_partial, ks > 0);
        wgmma_commit_group();
        if constexpr (kWaveTurns)
            named_barrier_arrive(3 + (math_wg ^ 1), 256);
        if (wave == T::kRowWaves - 1)
            pipe.advance<T::kNumStages>();
    };

    typename Sched::Unit unit;
    while (scheduler.next(unit)) {
        const uint32_t n0 = unit.n_block * T::kBlockN + col_offset;   // the warpgroup's first column
        // Grouped: whether this thread's two fragment rows keep their product, asked before the
        // K loop so that an index-layout look-up overlaps it.
        [[maybe_unused]] bool keep_row[2] = {true, true};
        if constexpr (Sched::kGrouped) {
#pragma unroll
            for (uint32_t half = 0; half < 2; ++half)
                keep_row[half] = scheduler.keeps_row(unit, row_slice * 64 + fragment_row(half));
        }
#pragma unroll
        for (uint32_t wave = 0; wave < T::kRowWaves; ++wave)
#pragma unroll
            for (uint32_t i = 0; i < T::kWarpgroupN / 2; ++i)
                acc[wave][i] = 0.0f;
        [[maybe_unused]] BlockScalesB1d2d<T> b_rows(scales, n0, n, unit.k_block_begin, unit_group(unit));
        KBlockScales<T> block_scales;
        if constexpr (!T::kScaleBPerColumn) {
            if (unit.k_block_begin < unit.k_block_end)
                b_rows.load_next(block_scales.next_b);
        }
        // The oldest unpromoted K block: its scales (from its stage, which it still holds; `last`:
        // no later block of the tile needs a 1D2D sfb load), then, once its wgmmas are done, the
        // release of its stage and its promotion.
        auto read_scales = [&](bool last) {
            block_scales.take(scale_slots + done.stage * T::kScaleStageBytes, slot_offsets, b_rows, last);
        };
        // kEarlyCLoad: the tile's c, brought into the epilogue's staging once, before the K block
        // early_c_load_block names is issued (tiles it leaves out load it just before their
        // store), at the store's column, remap included (accumulation is 1D1D only and
        // skip-head-mid 1D2D only, but the two must agree).
        [[maybe_unused]] const uint32_t c_block =
            kEarlyCLoad ? early_c_load_block(unit.k_block_begin, unit.k_block_end) : 0;
        [[maybe_unused]] auto load_c = [&] {
            if constexpr (kEarlyCLoad)
                T::Epilogue::prefetch_accumulator(
                    plan.staging + math_wg * T::Epilogue::kBytesPerWarpgroup,
                    &plan.epilogue_barriers[math_wg], unit_tma_d(tma_d, unit),
                    unit.m_block * T::kBlockM + math_wg * 64, skip_head_mid_column(n0, scales));
        };
        // (A stage is released once its last row wave's wgmmas are done.)
        auto promote_block = [&](float* block_partial, uint32_t wave = 0) {
            wgmma_fence_operands<T::kWarpgroupN / 2>(block_partial);
            if (wave == T::kRowWaves - 1) {
                release_stage<T>(&plan.empty[done.stage], cluster_rank);
                done.advance<T::kNumStages>();
            }
            Promotion<T>::promote(acc[wave], block_partial, n0, block_scales.current, wave);
        };
        // K blocks [from, to) of the tile.
        auto run_k_blocks = [&](uint32_t from, uint32_t to) {
            const uint32_t tile_end = unit.k_block_end;
            if constexpr (T::kOverlapPromotion) {
                // Two partial sets: block i + 1's wgmmas are issued before block i is promoted, so
                // they run under its FFMAs instead of leaving the tensor core idle. The K blocks go
                // in chains of up to kPromotionChain that start and end with no wgmma in flight:
                // with a group in flight across a loop's back edge, ptxas serializes every wgmma
                // (C7514), so only the last promotion of each chain runs alone.
                auto chain = [&](auto length, bool ends_tile) {
                    constexpr uint32_t kLength = decltype(length)::value;
                    issue(partial[0]);
#pragma unroll
                    for (uint32_t i = 1; i < kLength; ++i) {
                        issue(partial[i % 2]);
                        read_scales(false);
                        wgmma_wait_group<1>();
                        promote_block(partial[(i - 1) % 2]);
                    }
                    read_scales(ends_tile);
                    wgmma_wait_group<0>();
                    promote_block(partial[(kLength - 1) % 2]);
                };
                constexpr uint32_t kChain = T::kPromotionChain;
                uint32_t kb = from;
                for (; kb + kChain <= to; kb += kChain)
                    chain(ChainLength<kChain>{}, kb + kChain == tile_end);
                // The rest (fewer than kChain blocks): chains of 8, 4, 2 and 1 (kChain a power of 2).
                if constexpr (kChain > 8) {
                    if (to - kb >= 8) {
                        chain(ChainLength<8>{}, kb + 8 == tile_end);
                        kb += 8;
                    }
                }
                if constexpr (kChain > 4) {
                    if (to - kb >= 4) {
                        chain(ChainLength<4>{}, kb + 4 == tile_end);
                        kb += 4;
                    }
                }
                if constexpr (kChain > 2) {
                    if (to - kb >= 2) {
                        chain(ChainLength<2>{}, kb + 2 == tile_end);
                        kb += 2;
                    }
                }
                if (kb < to)
                    chain(ChainLength<1>{}, to == tile_end);
            } else {
                for (uint32_t kb = from; kb < to; ++kb) {
#pragma unroll
                    for (uint32_t wave = 0; wave < T::kRowWaves; ++wave) {
                        issue(partial[0], wave);
                        // The scales (every wave's) are read under the first wave's wgmmas.
                        if (wave == 0)
                            read_scales(kb + 1 == tile_end);
                        wgmma_wait_group<0>();
                        promote_block(partial[0], wave);
                    }
                }
            }
        };
        if constexpr (kStagger) {
            // Runs [begin, stagger), [stagger, c_block), [c_block, end) (the last with
            // kEarlyCLoad only): at a gated tile warpgroup 0 says "started" after the first and
            // warpgroup 1 waits for it before its first; c's load comes before the last. (Every
            // tile is split, as measured; the split only matters at a gated one: probe
            // DG_PROBE_STAGGER_SPLIT_GATED_ONLY, not yet timed.) One loop, not
            // three calls: an inlined copy of run_k_blocks is ~5k instructions at 128x112.
            const uint32_t last_run_begin = kEarlyCLoad ? c_block : unit.k_block_end;
            const bool gate = first_unit || kGateEveryTile;
            uint32_t stagger_block = unit.k_block_begin + kStaggerBlocks < last_run_begin
                                   ? unit.k_block_begin + kStaggerBlocks : last_run_begin;
#ifdef DG_PROBE_STAGGER_SPLIT_GATED_ONLY   // probe: ungated tiles run unsplit (one chain end less)
            if (!gate)
                stagger_block = unit.k_block_begin;
#endif
            if (math_wg == 1 && gate) {
                named_barrier_sync(5, 256);
                if (kGateEveryTile)
                    named_barrier_arrive(6, 256);
            }
#pragma unroll 1
            for (uint32_t run = 0; run < (kEarlyCLoad ? 3u : 2u); ++run) {
                run_k_blocks(run == 0 ? unit.k_block_begin : run == 1 ? stagger_block : c_block,
                             run == 0 ? stagger_block : run == 1 ? last_run_begin : unit.k_block_end);
                if (run == 0 && math_wg == 0 && gate) {
                    if (kGateEveryTile && !first_unit)
                        named_barrier_sync(6, 256);
                    named_barrier_arrive(5, 256);
                }
                if (run == 1)
                    load_c();
            }
            first_unit = false;
        } else if constexpr (kEarlyCLoad) {
            // Two runs of K blocks with c's load between them, outside either (one or two more
            // chain ends a tile): with the load's code inside the K loop (a check at every block,
            // or in every chain) the 1D1D wgrad tiles ran 7-17 % slower even where it never
            // loaded (NOTES.md, session 24).
#pragma unroll 1
            for (uint32_t run = 0; run < 2; ++run) {
                run_k_blocks(run == 0 ? unit.k_block_begin : c_block,
                             run == 0 ? c_block : unit.k_block_end);
                if (run == 0)
                    load_c();
            }
        } else {
            run_k_blocks(unit.k_block_begin, unit.k_block_end);
        }
        // (A unit without K blocks, a grouped padding tile, stores its zeros.) Storing this tile
        // in the next tile's first chain, under its first block's wgmmas, measured slower on the
        // H200 (K=2048: 116.8 vs 106.1 us; NOTES.md) and was removed.
        if constexpr (T::kSplitK) {
            // (The host never splits skip-head-mid problems: this store has no column remap.)
            T::SplitEpilogue::store(acc[0], unit, split.num_splits, scheduler.num_tiles, math_wg,
                                    split.workspace, split.counters,
                                    static_cast<typename T::OutT*>(split.d), split.ld_d, m, n,
                                    &plan.last_flags[math_wg], /*barrier_id=*/1 + math_wg);
        } else if constexpr (Sched::kGrouped) {
            store_grouped_rows<typename T::Epilogue, typename T::OutT, T::kWarpgroupN>(
                acc[0], keep_row, unit.rows_written, row_slice, math_wg,
                scheduler.a_row(unit) + row_slice * 64, n0,
                plan.staging + math_wg * T::Epilogue::kBytesPerWarpgroup,
                &plan.epilogue_barriers[math_wg], epilogue_phase, &tma_d,
                static_cast<typename T::OutT*>(split.d), split.ld_d, n);
        } else {
            if constexpr (T::kStreamK) {
                // A tile split between CTAs: sum the pieces (the host never takes stream-K for
                // skip-head-mid problems: this store has no column remap).
                if (unit.num_pieces > 1) {
                    T::SplitEpilogue::store(acc[0], unit, unit.num_pieces, scheduler.num_sk_tiles,
                                            math_wg, split.workspace, split.counters,
                                            static_cast<typename T::OutT*>(split.d), split.ld_d, m,
                                            n, &plan.last_flags[math_wg], /*barrier_id=*/1 + math_wg);
                    continue;
                }
            }
            // One store per row wave, each through its own staging slice: a wave waits only for
            // the store that last read its slice (the previous tile's same wave), not for the
            // store of the wave before it.
#pragma unroll
            for (uint32_t wave = 0; wave < T::kRowWaves; ++wave) {
                const uint32_t slice = math_wg * T::kRowWaves + wave;
                T::Epilogue::template store<kEarlyCLoad, T::kRowWaves - 1>(
                    acc[wave], plan.staging + slice * T::Epilogue::kBytesPerWarpgroup,
                    &plan.epilogue_barriers[math_wg], epilogue_phase, unit_tma_d(tma_d, unit),
                    unit.m_block * T::kBlockM + slice * 64, skip_head_mid_column(n0, scales),
                    /*barrier_id=*/1 + math_wg);
            }
        }
    }
    // (Every-tile stagger: warpgroup 1's acknowledgement of the last tile, taken here so that no
    // barrier is left half-arrived.)
    if constexpr (kStagger && kGateEveryTile) {
        if (math_wg == 0 && !first_unit)
            named_barrier_sync(6, 256);
    }
    // (Turns: warpgroup 1's last issue handed a turn to warpgroup 0, which takes it here.)
    if constexpr (kWaveTurns) {
        if (math_wg == 0)
            named_barrier_sync(3, 256);
    }
    T::Epilogue::finish();
}

// ---- the kernel body ------------------------------------------------------------------------------
// The scheduler is built from `scheduler_args` after start-up, so a grouped scheduler may read the
// group structure (written by the previous kernel, under PDL) as it is built. `m` and `n` are what
// the epilogues clip to; `sfa_group_rows` as ScaleTileLoads.
template <class T, class Sched, class... SchedulerArgs>
__device__ __forceinline__ void fp8_gemm_run(const TmaDescriptor& tma_a, const TmaDescriptor& tma_b,
                                             const TmaDescriptor& tma_d, const TmaDescriptor& tma_sfa,
                                             const TmaDescriptor& tma_sfb,
                                             const Fp8ScaleArguments& scales,
                                             const Fp8SplitArguments& split, uint32_t m, uint32_t n,
                                             uint32_t sfa_group_rows, SchedulerArgs... scheduler_args) {
    extern __shared__ uint8_t smem_raw[];
    const SharedPlan<T> plan(smem_raw);
    // Broadcast from lane 0: the compiler then knows it is warp-uniform and keeps the role,
    // stage and descriptor arithmetic in uniform registers (with a plain threadIdx.x / 128 it
    // rebuilt the wgmma descriptors in vector registers every K block: ~40 extra instructions).
    const uint32_t warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);

    if (threadIdx.x == 0) {
        tma_prefetch_descriptor(&tma_sfa);
        if constexpr (T::kScaleBPerColumn)
            tma_prefetch_descriptor(&tma_sfb);
    }
    start_pipeline<T>(plan, tma_a, tma_b, tma_d);
    const Sched scheduler(scheduler_args...);
    const uint32_t cluster_rank = T::kClusterSize > 1 ? cluster_cta_rank() : 0;

    if (warpgroup == 0) {
        setmaxnreg_dec<T::kProducerRegisters>();
        if (threadIdx.x == 0)
            produce<T>(tma_a, tma_b, scheduler, plan.full, plan.empty, plan.tiles_a, plan.tiles_b,
                       cluster_rank,
                       ScaleTileLoads<T>{&tma_sfa, &tma_sfb,
                                         plan.tiles_a + (T::kOffsetScales - T::kOffsetA), sfa_group_rows});
    } else {
        consume_fp8<T>(scheduler, plan, tma_d, scales, split, m, n, warpgroup - 1, cluster_rank);
    }
    finish_pipeline<T>();
}

// The dense GEMM: the persistent tile scheduler over an M x N grid of tiles (and K-slices).
template <class T>
__device__ __forceinline__ void fp8_gemm_body(const TmaDescriptor& tma_a, const TmaDescriptor& tma_b,
                                              const TmaDescriptor& tma_d, const TmaDescriptor& tma_sfa,
                                              const TmaDescriptor& tma_sfb, uint32_t shape_m,
                                              uint32_t shape_n, uint32_t shape_k,
                                              const Fp8ScaleArguments& scales,
                                              const Fp8SplitArguments& split) {
    const uint32_t m = T::kShapeM ? T::kShapeM : shape_m;
    const uint32_t n = T::kShapeN ? T::kShapeN : shape_n;
    const uint32_t k = T::kShapeK ? T::kShapeK : shape_k;
    const uint32_t num_k_blocks = (k + T::kBlockK - 1) / T::kBlockK;
    fp8_gemm_run<T, Scheduler<T>>(tma_a, tma_b, tma_d, tma_sfa, tma_sfb, scales, split, m, n, 0,
                                  m, n, num_k_blocks,
                                  T::kSplitK || T::kStreamK ? split.num_splits : 1);
}

}  // namespace dg::sm90
