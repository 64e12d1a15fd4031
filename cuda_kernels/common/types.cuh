// Fixed-width integer types for device code. NVRTC has no C library headers (no <stdint.h>),
// so under NVRTC they come from libcu++ (shipped with the CUDA headers); under nvcc from libc.
#pragma once

#ifdef __CUDACC_RTC__
#include <cuda/std/cstdint>
using cuda::std::int32_t;
using cuda::std::uint8_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
using cuda::std::uintptr_t;
#else
#include <stdint.h>
#endif
