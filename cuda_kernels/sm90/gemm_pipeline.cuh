// The parts of the SM90 GEMM pipeline every GEMM family shares (STYLE.md: mainloop producer,
// scheduler, shared-memory plan): the stage ring, the TMA producer warp, the consumers' stage
// release, and kernel start-up / shut-down. A family's traits T provide the tile shape, the
// stage count, operand majors, cluster shape and the shared-memory offsets these read; its
// consumer (the MMA loop and epilogue) stays in the family's own header.
// Used by bf16_gemm.cuh (K blocks of 64 BF16) and fp8_gemm.cuh (K blocks of 128 FP8): both are
// 128-byte rows, one 128B-swizzle span.
#pragma once

#include "../common/types.cuh"

#include "../common/ptx.cuh"
#include "scheduler.cuh"

namespace dg::sm90 {

// The dense GEMMs' scheduler: round-robin over whole tiles (or K-slices), or stream-K for the
// last wave (T::kStreamK).
template <class T, bool kStreamK = T::kStreamK>
struct DenseScheduler {
    using type = PersistentTileScheduler<T::kBlockM, T::kBlockN, T::kGroupM, T::kClusterM, T::kClusterN>;
};
template <class T>
struct DenseScheduler<T, true> {
    using type = StreamKTileScheduler<T::kBlockM, T::kBlockN, T::kGroupM>;
};
template <class T>
using Scheduler = typename DenseScheduler<T>::type;

// How many K blocks a consumer's second warpgroup starts behind its first (fp8_gemm.cuh's
// staggered warpgroups): `shipped`, unless a probe build (DG_PROBE_STAGGER_<d>,
// DG_PROBE_NO_STAGGER) sets it. (A function, not a namespace-scope constant: see epilogue.cuh's
// early_c_load_block.)
__host__ __device__ constexpr uint32_t stagger_blocks([[maybe_unused]] uint32_t shipped) {
#if defined(DG_PROBE_STAGGER_1)
    return 1;
#elif defined(DG_PROBE_STAGGER_2)
    return 2;
#elif defined(DG_PROBE_STAGGER_3)
    return 3;
#elif defined(DG_PROBE_NO_STAGGER)
    return 0;
#else
    return shipped;
#endif
}

// Whether a probe build gates every tile (DG_PROBE_STAGGER_EVERY_TILE) rather than only the
// first (a function for the reason stagger_blocks is one).
__host__ __device__ constexpr bool stagger_every_tile() {
#if defined(DG_PROBE_STAGGER_EVERY_TILE)
    return true;
#else
    return false;
#endif
}

// Stage ring position: the stage index and the parity of the barrier phase it is in.
struct PipelineState {
    uint32_t stage = 0, phase = 0;
    template <uint32_t kNumStages>
    __device__ __forceinline__ void advance() {
        if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1;
        }
    }
};

// ---- producer: one thread issues every TMA load -------------------------------------------------
// K-major tiles are boxes of [rows][128 bytes of K]; MN-major tiles are boxes of [64 of K][64 of MN], one
// per 64-element atom. With a cluster of 2 along N each CTA loads half of the A tile (half the rows
// when K-major; one atom, or half the K rows of a single atom, when MN-major) and multicasts it to
// both CTAs; B is never shared.
template <class T>
__device__ __forceinline__ void load_a_tile(uint8_t* a, const TmaDescriptor& tma_a, uint64_t* full,
                                            uint32_t m0, uint32_t k0, uint32_t cluster_rank) {
    if constexpr (T::kClusterN == 1) {
        if constexpr (T::kAKMajor) {
            tma_load_2d(a, &tma_a, full, k0, m0);
        } else {
#pragma unroll
            for (uint32_t i = 0; i < T::kBlockM / T::kAtom; ++i)
                tma_load_2d(a + i * T::kAtom * 128, &tma_a, full, m0 + i * T::kAtom, k0);
        }
    } else {
        constexpr uint16_t kBothCtas = 0b11;
        if constexpr (T::kAKMajor) {
            constexpr uint32_t kHalfRows = T::kBlockM / 2;
            tma_load_2d_multicast(a + cluster_rank * kHalfRows * 128, &tma_a, full, k0,
                                  m0 + cluster_rank * kHalfRows, kBothCtas);
        } else if constexpr (T::kBlockM == 2 * T::kAtom) {
            tma_load_2d_multicast(a + cluster_rank * T::kAtom * 128, &tma_a, full,
                                  m0 + cluster_rank * T::kAtom, k0, kBothCtas);
        } else {
            constexpr uint32_t kHalfK = T::kBlockK / 2;
            tma_load_2d_multicast(a + cluster_rank * kHalfK * 128, &tma_a, full, m0,
                                  k0 + cluster_rank * kHalfK, kBothCtas);
        }
    }
}

template <class T>
__device__ __forceinline__ void load_b_tile(uint8_t* b, const TmaDescriptor& tma_b, uint64_t* full,
                                            uint32_t n0, uint32_t k0, uint32_t cluster_rank) {
    constexpr uint32_t kAtoms = T::kBKMajor ? 1 : T::kBlockN / T::kAtom;
    if constexpr (T::kClusterM == 1) {
        if constexpr (T::kBKMajor) {
#ifdef DG_B_EVICT_FIRST
            // B streamed once (decode-sized M; the host's heuristics.sm90.b_evict_first defines
            // this): its lines are what later loads evict, not lines other kernels wrote.
            tma_load_2d_hinted(b, &tma_b, full, k0, n0, l2_policy_evict_first());
#else
            tma_load_2d(b, &tma_b, full, k0, n0);
#endif
        } else {
#pragma unroll
            for (uint32_t i = 0; i < kAtoms; ++i)
                tma_load_2d(b + i * T::kAtom * 128, &tma_b, full, n0 + i * T::kAtom, k0);
        }
    } else {
        constexpr uint16_t kBothCtas = 0b11;
        if constexpr (T::kBKMajor) {
#ifdef DG_PROBE_MULTICAST_LEADER
            // FP8 probe builds only (benchmarks/probe_fp8_clusters.py --leader): rank 0 multicasts
            // the whole B tile, rank 1 loads none of it; sm90_fp8_gemm.py then gives B's
            // descriptor whole-tile boxes (the BF16 host does not: no BF16 probe uses it).
            if (cluster_rank == 0)
                tma_load_2d_multicast(b, &tma_b, full, k0, n0, kBothCtas);
#else
            constexpr uint32_t kHalfRows = T::kBlockN / 2;
            tma_load_2d_multicast(b + cluster_rank * kHalfRows * 128, &tma_b, full, k0,
                                  n0 + cluster_rank * kHalfRows, kBothCtas);
#endif
        } else {
            constexpr uint32_t kHalfK = T::kBlockK / 2;
#pragma unroll
            for (uint32_t i = 0; i < kAtoms; ++i)
                tma_load_2d_multicast(b + i * T::kAtom * 128 + cluster_rank * kHalfK * 128, &tma_b,
                                      full, n0 + i * T::kAtom, k0 + cluster_rank * kHalfK,
                                      kBothCtas);
        }
    }
}

// A family's extra per-stage loads (FP8: the K block's scales), issued after the operand tiles
// on the same full barrier; T::kStageBytes counts their bytes. The default loads nothing.
struct NoStageExtras {
    __device__ __forceinline__ void operator()(uint32_t, uint64_t*, const WorkUnit&, uint32_t) const {}
};

// Which descriptors a unit's tiles are read from and stored through: the kernel's own for every
// unit but a k-grouped one (scheduler_k_grouped.cuh), whose group has its own.
__device__ __forceinline__ const TmaDescriptor* unit_tma_a(const TmaDescriptor& tma_a, const WorkUnit&) {
    return &tma_a;
}
__device__ __forceinline__ const TmaDescriptor* unit_tma_b(const TmaDescriptor& tma_b, const WorkUnit&) {
    return &tma_b;
}
__device__ __forceinline__ const TmaDescriptor* unit_tma_d(const TmaDescriptor& tma_d, const WorkUnit&) {
    return &tma_d;
}

// `Sched` is Scheduler<T> or a grouped scheduler (scheduler_grouped.cuh, scheduler_k_grouped.cuh):
// it hands out the units and says where their tiles start in A's and B's descriptors. A unit
// without K blocks (a grouped padding tile) loads nothing.
template <class T, class Sched, class StageExtras = NoStageExtras>
__device__ __forceinline__ void produce(const TmaDescriptor& tma_a, const TmaDescriptor& tma_b,
                                        Sched scheduler, uint64_t* full, uint64_t* empty,
                                        uint8_t* tiles_a, uint8_t* tiles_b, uint32_t cluster_rank,
                                        const StageExtras& extras = StageExtras{}) {
    PipelineState pipe;
    typename Sched::Unit unit;
    while (scheduler.next(unit)) {
        for (uint32_t kb = unit.k_block_begin; kb < unit.k_block_end; ++kb) {
            // The stage is free once every consumer warp that reads it (in both CTAs of a
            // cluster: our multicast writes into the peer too) has released it.
            mbarrier_wait(&empty[pipe.stage], pipe.phase ^ 1);
            mbarrier_arrive_expect_tx(&full[pipe.stage], T::kStageBytes);
            const uint32_t k0 = kb * T::kBlockK;
            load_a_tile<T>(tiles_a + pipe.stage * T::kTileABytes, *unit_tma_a(tma_a, unit), &full[pipe.stage],
                           scheduler.a_row(unit), k0, cluster_rank);
            load_b_tile<T>(tiles_b + pipe.stage * T::kTileBBytes, *unit_tma_b(tma_b, unit), &full[pipe.stage],
                           scheduler.b_row(unit), scheduler.b_k_offset(unit) + k0, cluster_rank);
            extras(pipe.stage, &full[pipe.stage], unit, kb);
            pipe.advance<T::kNumStages>();
        }
    }
}

template <class T>
__device__ __forceinline__ void release_stage(uint64_t* empty, uint32_t cluster_rank) {
    // One arrival per warp: wgmma.wait_group is warpgroup-collective, so every lane is done.
    if (lane_index() == 0) {
        mbarrier_arrive(empty);
        if constexpr (T::kClusterSize > 1)
            mbarrier_arrive_cluster(empty, cluster_rank ^ 1);
    }
}

// ---- shared-memory plan and start-up --------------------------------------------------------------
// Pointers into the dynamic shared memory per the traits' offsets; the base is rounded up to
// 1024 bytes (the 128B-swizzle atom), which the traits' kSmemBytes budgets for.
template <class T>
struct SharedPlan {
    uint8_t* tiles_a;
    uint8_t* tiles_b;
    uint8_t* staging;
    uint64_t* full;
    uint64_t* empty;
    uint64_t* epilogue_barriers;
    uint32_t* last_flags;

    __device__ __forceinline__ explicit SharedPlan(uint8_t* smem_raw) {
        uint8_t* smem = reinterpret_cast<uint8_t*>(
            (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
        tiles_a = smem + T::kOffsetA;
        tiles_b = smem + T::kOffsetB;
        staging = smem + T::kOffsetStaging;
        full = reinterpret_cast<uint64_t*>(smem + T::kOffsetBarriers);
        empty = full + T::kNumStages;
        epilogue_barriers = empty + T::kNumStages;
        last_flags = reinterpret_cast<uint32_t*>(smem + T::kOffsetFlags);
    }
};

// Thread 0 prefetches the descriptors and initialises the barriers; then every thread (of every
// CTA of the cluster: peers arrive on our barriers and multicast into our tiles) waits until they
// are visible, and, under programmatic dependent launch, until the previous kernel's writes are.
template <class T>
__device__ __forceinline__ void start_pipeline(const SharedPlan<T>& plan, const TmaDescriptor& tma_a,
                                               const TmaDescriptor& tma_b, const TmaDescriptor& tma_d) {
    if (threadIdx.x == 0) {
        tma_prefetch_descriptor(&tma_a);
        tma_prefetch_descriptor(&tma_b);
        tma_prefetch_descriptor(&tma_d);
#pragma unroll
        for (uint32_t s = 0; s < T::kNumStages; ++s) {
            mbarrier_init(&plan.full[s], 1);
            // One arrival per consumer warp of every CTA whose shared half lands in this stage.
            mbarrier_init(&plan.empty[s], 4 * T::kNumMathWarpgroups * T::kClusterSize);
        }
#pragma unroll
        for (uint32_t w = 0; w < T::kNumMathWarpgroups; ++w)
            mbarrier_init(&plan.epilogue_barriers[w], 1);
        fence_mbarrier_init();
    }
    if constexpr (T::kClusterSize > 1)
        cluster_sync();
    else
        __syncthreads();
    // Without PDL this returns at once.
    griddepcontrol_wait();
}

// A CTA may not exit while its cluster peer can still arrive on its barriers or multicast into it.
template <class T>
__device__ __forceinline__ void finish_pipeline() {
    if constexpr (T::kClusterSize > 1)
        cluster_sync();
}

}  // namespace dg::sm90
