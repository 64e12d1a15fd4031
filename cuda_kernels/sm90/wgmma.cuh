// Warpgroup MMA plumbing for sm_90a: shared-memory matrix descriptors and the fence / commit /
// wait instructions around wgmma.mma_async (PTX ISA 9.7.15).
#pragma once

#include "../common/types.cuh"

namespace dg::sm90 {

// Shared-memory matrix descriptor (PTX ISA 9.7.15.5.1) for a tile stored with the 128-byte
// swizzle that TMA writes. Bits: 0-13 start address >> 4, 16-29 leading byte offset >> 4,
// 32-45 stride byte offset >> 4, 62-63 layout (1 = 128B swizzle). Tiles start 1024-byte aligned,
// so the base-offset field stays 0.
//   K-major:  rows of 128 B (64 bf16 of K); SBO = 1024 B between 8-row groups; LBO unused.
//   MN-major: atoms of 64 MN-elements x 64 K-rows; SBO = 1024 B between 8-row groups of K,
//             LBO = byte distance between consecutive 64-element atoms along MN.
__device__ __forceinline__ uint64_t smem_descriptor_sw128(uint32_t smem_byte_addr,
                                                          uint32_t leading_byte_offset) {
    constexpr uint64_t kStrideByteOffset = 1024;
    uint64_t desc = 0;
    desc |= static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
    desc |= static_cast<uint64_t>((leading_byte_offset & 0x3FFFF) >> 4) << 16;
    desc |= static_cast<uint64_t>(kStrideByteOffset >> 4) << 32;
    desc |= static_cast<uint64_t>(1) << 62;
    return desc;
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit_group() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int kPendingGroups>
__device__ __forceinline__ void wgmma_wait_group() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(kPendingGroups) : "memory");
}

// Where a thread's accumulators sit in the m64nN tile (PTX ISA 9.7.15.5.2, wgmma D fragment):
// registers 4t + 2h + {0, 1} hold row 16 * warp + lane / 4 + 8h, columns 8t + 2 * (lane % 4) + {0, 1}
// (warp and lane within the warpgroup). Both epilogues walk the fragment through these two.
__device__ __forceinline__ uint32_t fragment_row(uint32_t half) {
    const uint32_t thread = threadIdx.x % 128;
    return (thread / 32) * 16 + (thread % 32) / 4 + half * 8;
}

__device__ __forceinline__ uint32_t fragment_col(uint32_t t) {
    return t * 8 + (threadIdx.x % 4) * 2;
}

// Keeps the compiler from moving accesses of accumulator registers across an in-flight wgmma.
template <int kCount>
__device__ __forceinline__ void wgmma_fence_operands(float* regs) {
#pragma unroll
    for (int i = 0; i < kCount; ++i)
        asm volatile("" : "+f"(regs[i]) :: "memory");
}

}  // namespace dg::sm90
