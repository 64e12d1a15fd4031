// Thin wrappers over the PTX instructions the SM90 kernels use: one function per instruction,
// named after it, with the PTX ISA section it comes from. No CUTLASS/CuTe here on purpose: these
// few dozen lines compile in milliseconds, a CuTe include costs seconds of NVRTC time per kernel
// (TOOLCHAIN.md), and users pay that at cold start.
#pragma once

#include <cuda_bf16.h>
#include "types.cuh"

namespace dg {

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned (cuda.h does not compile under
// NVRTC without a C library, so it is declared here). Passed as a __grid_constant__ parameter.
struct alignas(64) TmaDescriptor {
    unsigned long long opaque[16];
};

__device__ __forceinline__ uint32_t smem_addr(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

__device__ __forceinline__ uint32_t warp_index() { return threadIdx.x / 32; }
__device__ __forceinline__ uint32_t lane_index() { return threadIdx.x % 32; }

// ---- mbarrier (PTX ISA 9.7.13.15) -------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(arrive_count));
}

// Makes the mbarrier initialisations visible to the async proxy (TMA) and to other threads.
__device__ __forceinline__ void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// Blocks until the phase of the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" :: "r"(smem_addr(bar)), "r"(parity) : "memory");
}

// ---- named barriers (PTX ISA 9.7.13.1) --------------------------------------------------------

// Barrier 0 is __syncthreads(); kernels number theirs from 1.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t num_threads) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(num_threads) : "memory");
}

// Arrives without waiting: a signal to the threads that bar.sync on `id` (ordered hand-offs).
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t num_threads) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(num_threads) : "memory");
}

// ---- proxy fences (PTX ISA 9.7.13.4) ----------------------------------------------------------

// Ordinary shared-memory stores that TMA (the async proxy) reads next need this in each writer.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- register reallocation (PTX ISA 9.7.19.5, sm_90a) -----------------------------------------

template <uint32_t kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(kRegisters));
}

template <uint32_t kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(kRegisters));
}

// ---- TMA: bulk tensor copies (PTX ISA 9.7.9.25) -----------------------------------------------

__device__ __forceinline__ void tma_prefetch_descriptor(const TmaDescriptor* desc) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(desc)) : "memory");
}

// Global -> shared, completing on `bar` with complete_tx of the box's bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDescriptor* desc, uint64_t* bar,
                                            int32_t inner, int32_t outer) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];"
        :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)),
           "r"(inner), "r"(outer)
        : "memory");
}

// A load under an L2 cache policy (PTX ISA 9.7.9.25 .L2::cache_hint; the policy from createpolicy,
// 9.7.9.18): gemm_pipeline.cuh's B loads under DG_B_EVICT_FIRST.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

__device__ __forceinline__ void tma_load_2d_hinted(void* dst, const TmaDescriptor* desc, uint64_t* bar,
                                                   int32_t inner, int32_t outer, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)),
           "r"(inner), "r"(outer), "l"(policy)
        : "memory");
}

// Shared -> global; out-of-bounds rows/columns of the box are not written (tails for free).
__device__ __forceinline__ void tma_store_2d(const TmaDescriptor* desc, const void* src,
                                             int32_t inner, int32_t outer) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 :: "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(src)),
                    "r"(inner), "r"(outer)
                 : "memory");
}

// As tma_store_2d, but adding the box to what global memory holds (done in L2, element by element).
__device__ __forceinline__ void tma_reduce_add_2d(const TmaDescriptor* desc, const void* src,
                                                  int32_t inner, int32_t outer) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];"
                 :: "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(src)),
                    "r"(inner), "r"(outer)
                 : "memory");
}

__device__ __forceinline__ void tma_store_commit_group() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until all but the newest kPending committed store groups have finished READING shared
// memory (their buffers are reusable).
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(kPending) : "memory");
}

__device__ __forceinline__ void tma_store_wait_read_all() { tma_store_wait_read<0>(); }

// Waits until the committed stores are complete (before the kernel exits).
__device__ __forceinline__ void tma_store_wait_all() {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// ---- stmatrix (PTX ISA 9.7.14.5.16, sm_90) ----------------------------------------------------

// Four 8x8 matrices of 16-bit elements to shared memory: register i of every lane holds the two
// elements (row lane / 4, columns 2 * (lane % 4) and + 1) of matrix i; lanes 8i..8i+7 give the
// addresses of matrix i's rows (16 contiguous bytes each).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// ---- programmatic dependent launch (PTX ISA 9.7.13.9, sm_90) ----------------------------------

// With the PDL launch attribute the next kernel may start early; it waits here for this one.
__device__ __forceinline__ void griddepcontrol_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void griddepcontrol_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

}  // namespace dg

namespace dg {

// ---- clusters (PTX ISA 9.7.13.3, 9.7.9.25, sm_90) ---------------------------------------------

__device__ __forceinline__ uint32_t cluster_cta_rank() {
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// All threads of all CTAs in the cluster; release/acquire orders shared-memory accesses (barrier
// initialisation before peers use the barriers, and last remote accesses before a CTA exits).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// Arrives on the mbarrier at the same shared-memory offset in CTA `cta_rank` of the cluster.
// Default (CTA-scope) release semantics: the arrival only says "done reading this stage", no
// writes need publishing cluster-wide, and a cluster-scope release per k-block costs a fence.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta_rank) {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" :: "r"(smem_addr(bar)), "r"(cta_rank) : "memory");
}

// Global -> shared of every CTA in `cta_mask`, at the same offsets, each completing on its own
// mbarrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const TmaDescriptor* desc,
                                                      uint64_t* bar, int32_t inner, int32_t outer,
                                                      uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)),
           "r"(inner), "r"(outer), "h"(cta_mask)
        : "memory");
}

}  // namespace dg
