// SM90 BF16 GEMM: D[M,N] (+)= A[M,K] @ B[N,K]^T with FP32 accumulation, BF16 or FP32 D.
//
// Pipeline: warpgroup 0 is the producer (one thread issues TMA loads into a ring of kNumStages
// shared-memory stages, each guarded by a "full" and an "empty" mbarrier); warpgroups 1..W are
// consumers, each owning 64 rows of the BLOCK_M x BLOCK_N tile and issuing one m64nBLOCK_N k16
// wgmma per 16 of K. The grid is persistent (PersistentTileScheduler), so the producer runs ahead
// into the next tile while the consumers run the epilogue (SwizzledTmaStoreEpilogue). The M-grouped
// GEMMs run this same kernel with a grouped scheduler (scheduler_grouped.cuh, via bf16_gemm_run),
// the k-grouped one with the k-grouped scheduler (scheduler_k_grouped.cuh).
// A and B may each be K-major or MN-major (wgmma's transpose bits read MN-major tiles directly).
#pragma once

#include <cuda_bf16.h>
#include "../common/types.cuh"

#include "../common/ptx.cuh"
#include "epilogue.cuh"
#include "gemm_pipeline.cuh"
#include "splitk_epilogue.cuh"
#include "wgmma.cuh"
#include "wgmma_bf16.cuh"

namespace dg::sm90 {

template <uint32_t kBlockM_, uint32_t kBlockN_, uint32_t kNumStages_, bool kAKMajor_,
          bool kBKMajor_, typename OutT_, bool kAccumulate_, bool kSplitK_, uint32_t kGroupM_,
          uint32_t kClusterM_, uint32_t kClusterN_, uint32_t kShapeM_, uint32_t kShapeN_,
          uint32_t kShapeK_, bool kStreamK_ = false>
struct Bf16GemmTraits {
    static constexpr uint32_t kBlockM = kBlockM_, kBlockN = kBlockN_, kNumStages = kNumStages_;
    static constexpr bool kAKMajor = kAKMajor_, kBKMajor = kBKMajor_, kAccumulate = kAccumulate_;
    // Split-K: K-slices of a tile on several CTAs, reduced by SplitKEpilogue (num_splits at run time).
    static constexpr bool kSplitK = kSplitK_;
    // Stream-K for the last wave (StreamKTileScheduler): whole tiles go through the TMA-store
    // epilogue, tiles split between CTAs through SplitKEpilogue.
    static constexpr bool kStreamK = kStreamK_;
    static constexpr uint32_t kGroupM = kGroupM_;
    // CTAs per cluster along M or N (at most one of them 2). Along N the pair shares every A tile,
    // along M every B tile: each CTA loads half of the shared tile and TMA multicasts the half to
    // both, halving that operand's L2 -> SM traffic. cuBLAS's M=4096 kernels share the wide B
    // tile this way (nvjet_..._256x128_..._1x2, probe_waves.py).
    static constexpr uint32_t kClusterM = kClusterM_, kClusterN = kClusterN_;
    static constexpr uint32_t kClusterSize = kClusterM * kClusterN;
    // Problem dims baked in at compile time (compiled_dims); 0 = passed at run time.
    static constexpr uint32_t kShapeM = kShapeM_, kShapeN = kShapeN_, kShapeK = kShapeK_;
    using OutT = OutT_;

    static constexpr uint32_t kBlockK = 64;  // 128 bytes of BF16: one 128B-swizzle row
    static constexpr uint32_t kAtom = 64;    // MN-major tiles: 64-element (128 B) atoms
    static constexpr uint32_t kNumMathWarpgroups = kBlockM / 64;
    static constexpr uint32_t kNumThreads = 128 * (1 + kNumMathWarpgroups);

    static constexpr uint32_t kTileABytes = kBlockM * kBlockK * 2;
    static constexpr uint32_t kTileBBytes = kBlockN * kBlockK * 2;
    static constexpr uint32_t kStageBytes = kTileABytes + kTileBBytes;

    // Barriers: full and empty per stage, one epilogue load barrier per consumer warpgroup.
    static constexpr uint32_t kNumBarriers = 2 * kNumStages + kNumMathWarpgroups;
    // The epilogue stages what shared memory the ring leaves (at least its default chunks, unless
    // the ring is deeper than those allow: SwizzledTmaStoreEpilogue's kMaxChunkSlabs).
    static constexpr uint32_t kNonStagingBytes =
        kNumStages * kStageBytes + kNumBarriers * 8 + kNumMathWarpgroups * 4 + 1024;
    using Epilogue = SwizzledTmaStoreEpilogue<
        OutT, kBlockN, kAccumulate,
        kSplitK ? 0xffffffffu : staging_room_slabs<OutT, kBlockN>(kNonStagingBytes, kNumMathWarpgroups)>;
    using SplitEpilogue = SplitKEpilogue<OutT, kBlockN, kBlockM / 64, kAccumulate>;
    using Mma = WgmmaBf16<kBlockN, kAKMajor ? 0 : 1, kBKMajor ? 0 : 1>;

    // Shared-memory plan; every tile region starts 1024-byte aligned (128B-swizzle atom).
    static constexpr uint32_t kOffsetA = 0;
    static constexpr uint32_t kOffsetB = kOffsetA + kNumStages * kTileABytes;
    static constexpr uint32_t kOffsetStaging = kOffsetB + kNumStages * kTileBBytes;
    // Split-K reduces through global memory: no staging buffer.
    static constexpr uint32_t kOffsetBarriers =
        kOffsetStaging + (kSplitK ? 0 : kNumMathWarpgroups * Epilogue::kBytesPerWarpgroup);
    static constexpr uint32_t kOffsetFlags = kOffsetBarriers + kNumBarriers * 8;  // split-K "last" flags
    static constexpr uint32_t kSmemBytes = kOffsetFlags + kNumMathWarpgroups * 4 + 1024;  // + align

    // Registers: the producer needs few; the consumers hold BLOCK_N/2 FP32 accumulators each.
    static constexpr uint32_t kProducerRegisters = 40;
    static constexpr uint32_t kConsumerRegisters = kNumMathWarpgroups == 1 ? 240 : 232;

    static_assert(kBlockM == 64 || kBlockM == 128, "block M is 64 or 128 (one or two consumer warpgroups)");
    static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "block N is a multiple of 16 up to 256");
    static_assert(kBKMajor || kBlockN % kAtom == 0, "an MN-major B needs whole 64-column atoms");
    static_assert(kClusterSize == 1 || kClusterSize == 2, "clusters of 1 or 2 CTAs, along M or N");
    static_assert(!kStreamK || (!kSplitK && kClusterSize == 1), "stream-K: no split-K, no clusters");
    static_assert(kTileABytes % 1024 == 0 && kTileBBytes % 1024 == 0, "tiles must stay 1024-aligned");
    static_assert(kSmemBytes <= 232448, "shared memory plan exceeds the SM90 limit (227 KB)");
};

// Split-K arguments (used by T::kSplitK and T::kStreamK): an FP32 workspace, zeroed per-tile
// counters, and D as a plain pointer with its row stride. num_splits: K-slices per tile (split-K),
// or the tiles that run whole before the stream-K phase (stream-K; StreamKTileScheduler).
struct SplitKArguments {
    uint32_t num_splits;
    float* workspace;
    uint32_t* counters;
    void* d;
    uint32_t ld_d;
};

// ---- consumers: one m64nBLOCK_N k16 wgmma per 16 of K, then the epilogue -------------------------
// `Sched` is Scheduler<T>, a grouped scheduler (scheduler_grouped.cuh) or the k-grouped one
// (scheduler_k_grouped.cuh, whose units name their group's D descriptor). A grouped unit may have
// no K blocks (a padding tile: its rows are written as zeros) and says which of its rows hold
// A @ B (the others are written as zeros) and how many are stored at all: a warpgroup whose 64
// rows are all stored goes through the TMA-store epilogue; one with fewer (the last tile of a
// masked group, the end of a psum layout) stores them with plain global stores, because a TMA
// box cannot leave rows inside the tensor unwritten.
template <class T, class Sched>
__device__ __forceinline__ void consume(Sched scheduler, uint64_t* full, uint64_t* empty,
                                        uint8_t* tiles_a, uint8_t* tiles_b, uint8_t* staging,
                                        uint64_t* epilogue_barriers, uint32_t* last_flags,
                                        const TmaDescriptor& tma_d, const SplitKArguments& split,
                                        uint32_t m, uint32_t n, uint32_t num_splits,
                                        uint32_t math_wg, uint32_t cluster_rank) {
    static_assert(!Sched::kGrouped || (!T::kSplitK && !T::kAccumulate && T::kClusterSize == 1),
                  "grouped GEMMs: no split-K, no accumulation, no clusters");
    setmaxnreg_inc<T::kConsumerRegisters>();
    float acc[T::kBlockN / 2];
    PipelineState pipe;
    uint32_t epilogue_phase = 0;

    // Per-k16-step descriptor advance: K-major tiles move 16 elements (32 B) along the row;
    // MN-major tiles move 16 rows of K (16 * 128 B).
    constexpr uint32_t kStepA = T::kAKMajor ? 32 : 16 * 128;
    constexpr uint32_t kStepB = T::kBKMajor ? 32 : 16 * 128;
    constexpr uint32_t kLeadingA = T::kAKMajor ? 16 : T::kAtom * 128;
    constexpr uint32_t kLeadingB = T::kBKMajor ? 16 : T::kAtom * 128;
    // This warpgroup's 64 rows of A: 64 rows of 128 B (K-major) or the math_wg-th atom (MN-major).
    const uint32_t a_offset = math_wg * 64 * 128;
    // Whether an accumulating tile loads its c under the K loop, after issuing the K block
    // early_c_load_block names, rather than at its store: a probe build (DG_PROBE_EARLY_C_LOAD,
    // benchmarks/probe_bf16.py) until that rule is timed here. (FP8 1D1D ships it, with the load
    // outside its K loop: fp8_gemm.cuh. Here it sits in the loop, which measured +0.9 % at
    // 4096x4096x7168, even at K = 2048 and +8 % at 4096x32768x512 with c loaded 8 blocks before
    // the end: NOTES.md session 24.)
#ifdef DG_PROBE_EARLY_C_LOAD
    constexpr bool kEarlyCLoad = T::kAccumulate && !T::kSplitK && !T::kStreamK;
#else
    constexpr bool kEarlyCLoad = false;
#endif

    // Probe (DG_PROBE_STAGGER_<d>): warpgroup 1 starts its first tile once warpgroup 0 has issued
    // that tile's first d K blocks (barrier 5), so that the two reach their epilogues d blocks
    // apart and one's epilogue runs under the other's wgmmas; after that the lead is left to
    // itself, as in fp8_gemm.cuh's shipped k-grouped form; no gain on the M=4096 shapes (H100,
    // NOTES.md session 35: geomean vs cuBLAS 0.999 at d = 2, 0.997 at d = 1, against 1.006). With
    // DG_PROBE_STAGGER_EVERY_TILE every tile is gated (barrier 6 acknowledges, and warpgroup 0
    // takes the last acknowledgement after its last tile): 0.93-1.01x the speed at 128x256
    // (session 33).
    constexpr uint32_t kStaggerBlocks = stagger_blocks(0);
    constexpr bool kStagger = kStaggerBlocks > 0 && T::kBlockM == 128 && !T::kSplitK &&
                              !T::kStreamK && kStaggerBlocks < T::kNumStages;
    constexpr bool kGateEveryTile = stagger_every_tile();
    [[maybe_unused]] bool first_unit = true;
    [[maybe_unused]] auto say_started = [&] {
        if (kGateEveryTile && !first_unit)
            named_barrier_sync(6, 256);
        named_barrier_arrive(5, 256);
    };

    typename Sched::Unit unit;
    while (scheduler.next(unit)) {
        [[maybe_unused]] const uint32_t stagger_block =
            unit.k_block_begin + kStaggerBlocks < unit.k_block_end ? unit.k_block_begin + kStaggerBlocks
                                                                   : unit.k_block_end;
        [[maybe_unused]] const bool gate = first_unit || kGateEveryTile;
        if constexpr (kStagger) {
            if (math_wg == 1 && gate) {
                named_barrier_sync(5, 256);
                if (kGateEveryTile)
                    named_barrier_arrive(6, 256);
            } else if (math_wg == 0 && gate && unit.k_block_begin == unit.k_block_end) {
                say_started();
            }
        }
        // Grouped: whether this thread's two fragment rows keep their product, asked before the
        // K loop so that a look-up in global memory (index layout) overlaps it; and zeros in the
        // accumulators, which a padding unit (no K blocks) stores as they are. (Zeroed in place
        // before the loop: a zeroing branch after it made ptxas keep a second copy of the
        // accumulators, and the 128x256 tile spilled.)
        [[maybe_unused]] bool keep_row[2] = {true, true};
        if constexpr (Sched::kGrouped) {
#pragma unroll
            for (uint32_t half = 0; half < 2; ++half)
                keep_row[half] = scheduler.keeps_row(unit, math_wg * 64 + fragment_row(half));
#pragma unroll
            for (uint32_t i = 0; i < T::kBlockN / 2; ++i)
                acc[i] = 0.0f;
        }
        // kEarlyCLoad: the tile's c, brought into the epilogue's staging under the K loop from the
        // K block early_c_load_block names (tiles it leaves out load it just before their store).
        [[maybe_unused]] const uint32_t c_block =
            kEarlyCLoad ? early_c_load_block(unit.k_block_begin, unit.k_block_end) : 0;
        [[maybe_unused]] auto load_c = [&] {
            if constexpr (kEarlyCLoad)
                T::Epilogue::prefetch_accumulator(staging + math_wg * T::Epilogue::kBytesPerWarpgroup,
                                                  &epilogue_barriers[math_wg], unit_tma_d(tma_d, unit),
                                                  unit.m_block * T::kBlockM + math_wg * 64,
                                                  unit.n_block * T::kBlockN);
        };
        uint32_t previous_stage = 0;
        for (uint32_t kb = unit.k_block_begin; kb < unit.k_block_end; ++kb) {
            mbarrier_wait(&full[pipe.stage], pipe.phase);
            const uint32_t a_base = smem_addr(tiles_a + pipe.stage * T::kTileABytes) + a_offset;
            const uint32_t b_base = smem_addr(tiles_b + pipe.stage * T::kTileBBytes);
            wgmma_fence_operands<T::kBlockN / 2>(acc);
            wgmma_fence();
#pragma unroll
            for (uint32_t ks = 0; ks < T::kBlockK / 16; ++ks) {
                const uint64_t desc_a = smem_descriptor_sw128(a_base + ks * kStepA, kLeadingA);
                const uint64_t desc_b = smem_descriptor_sw128(b_base + ks * kStepB, kLeadingB);
                T::Mma::mma(desc_a, desc_b, acc, kb > unit.k_block_begin || ks > 0);
            }
            wgmma_commit_group();
            // Keep this k-block's MMAs in flight; the previous block's are done, free its stage.
            wgmma_wait_group<1>();
            wgmma_fence_operands<T::kBlockN / 2>(acc);
            if (kb > unit.k_block_begin)
                release_stage<T>(&empty[previous_stage], cluster_rank);
            previous_stage = pipe.stage;
            pipe.advance<T::kNumStages>();
            if constexpr (kEarlyCLoad) {
                if (kb == c_block)
                    load_c();
            }
            if constexpr (kStagger) {
                if (math_wg == 0 && gate && kb + 1 == stagger_block)
                    say_started();
            }
        }
        if constexpr (kStagger)
            first_unit = false;
        // Outside any branch: a wgmma wait on a path ptxas cannot prove uniform serializes every
        // wgmma of the kernel (C7518).
        wgmma_wait_group<0>();
        wgmma_fence_operands<T::kBlockN / 2>(acc);
        if (!Sched::kGrouped || unit.k_block_begin < unit.k_block_end)
            release_stage<T>(&empty[previous_stage], cluster_rank);
        if constexpr (kEarlyCLoad) {
            if (c_block == unit.k_block_end)   // the loop did not load c
                load_c();
        }

        if constexpr (T::kSplitK) {
            T::SplitEpilogue::store(acc, unit, num_splits, scheduler.num_tiles, math_wg,
                                    split.workspace, split.counters,
                                    static_cast<typename T::OutT*>(split.d), split.ld_d, m, n,
                                    &last_flags[math_wg], /*barrier_id=*/1 + math_wg);
        } else if constexpr (Sched::kGrouped) {
            store_grouped_rows<typename T::Epilogue, typename T::OutT, T::kBlockN>(
                acc, keep_row, unit.rows_written, /*row_slice=*/math_wg, math_wg,
                scheduler.a_row(unit) + math_wg * 64, unit.n_block * T::kBlockN,
                staging + math_wg * T::Epilogue::kBytesPerWarpgroup,
                &epilogue_barriers[math_wg], epilogue_phase, &tma_d,
                static_cast<typename T::OutT*>(split.d), split.ld_d, n);
        } else {
            if constexpr (T::kStreamK) {
                if (unit.num_pieces > 1) {   // a tile split between CTAs: sum the pieces
                    T::SplitEpilogue::store(acc, unit, unit.num_pieces, scheduler.num_sk_tiles,
                                            math_wg, split.workspace, split.counters,
                                            static_cast<typename T::OutT*>(split.d), split.ld_d, m,
                                            n, &last_flags[math_wg], /*barrier_id=*/1 + math_wg);
                    continue;
                }
            }
            T::Epilogue::template store<kEarlyCLoad>(
                acc, staging + math_wg * T::Epilogue::kBytesPerWarpgroup, &epilogue_barriers[math_wg],
                epilogue_phase, unit_tma_d(tma_d, unit), unit.m_block * T::kBlockM + math_wg * 64,
                unit.n_block * T::kBlockN, /*barrier_id=*/1 + math_wg);
        }
    }
    if constexpr (kStagger && kGateEveryTile) {
        if (math_wg == 0 && !first_unit)
            named_barrier_sync(6, 256);
    }
    T::Epilogue::finish();
}

// ---- the kernel body: shared-memory plan, barriers, roles ---------------------------------------
// The scheduler is built from `scheduler_args` after start-up, so a grouped scheduler may read the
// group structure (written by the previous kernel, under PDL) as it is built.
template <class T, class Sched, class... SchedulerArgs>
__device__ __forceinline__ void bf16_gemm_run(const TmaDescriptor& tma_a, const TmaDescriptor& tma_b,
                                              const TmaDescriptor& tma_d, uint32_t m, uint32_t n,
                                              uint32_t num_splits, const SplitKArguments& split,
                                              SchedulerArgs... scheduler_args) {
    extern __shared__ uint8_t smem_raw[];
    const SharedPlan<T> plan(smem_raw);
    const uint32_t warpgroup = threadIdx.x / 128;

    start_pipeline<T>(plan, tma_a, tma_b, tma_d);
    const Sched scheduler(scheduler_args...);
    const uint32_t cluster_rank = T::kClusterSize > 1 ? cluster_cta_rank() : 0;

    if (warpgroup == 0) {
        setmaxnreg_dec<T::kProducerRegisters>();
        if (threadIdx.x == 0)
            produce<T>(tma_a, tma_b, scheduler, plan.full, plan.empty, plan.tiles_a, plan.tiles_b,
                       cluster_rank);
    } else {
        consume<T>(scheduler, plan.full, plan.empty, plan.tiles_a, plan.tiles_b, plan.staging,
                   plan.epilogue_barriers, plan.last_flags, tma_d, split, m, n, num_splits,
                   warpgroup - 1, cluster_rank);
    }
    finish_pipeline<T>();
}

// The dense GEMM: the persistent tile scheduler over an M x N grid of tiles (and K-slices).
template <class T>
__device__ __forceinline__ void bf16_gemm_body(const TmaDescriptor& tma_a, const TmaDescriptor& tma_b,
                                               const TmaDescriptor& tma_d, uint32_t shape_m,
                                               uint32_t shape_n, uint32_t shape_k,
                                               const SplitKArguments& split) {
    const uint32_t m = T::kShapeM ? T::kShapeM : shape_m;
    const uint32_t n = T::kShapeN ? T::kShapeN : shape_n;
    const uint32_t k = T::kShapeK ? T::kShapeK : shape_k;
    const uint32_t num_k_blocks = (k + T::kBlockK - 1) / T::kBlockK;
    const uint32_t num_splits = T::kSplitK ? split.num_splits : 1;
    // The scheduler's last argument: K-slices per tile, or with stream-K the whole tiles.
    bf16_gemm_run<T, Scheduler<T>>(tma_a, tma_b, tma_d, m, n, num_splits, split, m, n,
                                   num_k_blocks, T::kStreamK ? split.num_splits : num_splits);
}

}  // namespace dg::sm90
