"""TMA descriptors (CUtensorMap) for 2-D tiles: parameters in pure Python, encoding on the driver.

`Tma2dParams` holds everything cuTensorMapEncodeTiled takes except the address, and checks the
driver's rules up front (CUDA driver API, cuTensorMapEncodeTiled), so that a bad layout becomes a
Python error naming the tensor rather than CUDA_ERROR_INVALID_VALUE, and so the rules are unit-tested
without a GPU. A `DescriptorCache` per operand layout keeps encoded descriptors in host buffers by
address (weights, benchmark loops and CUDA-graph replays hit every time) and encodes a new address
with a direct ctypes call of the driver; `encode` is the same through cuda.bindings (the fallback,
and the reference the GPU tests compare the ctypes encoding with).
"""
import functools
import sys
from dataclasses import dataclass

from dg_triton.env import env_flag

SWIZZLE_NONE, SWIZZLE_32B, SWIZZLE_64B, SWIZZLE_128B = 0, 32, 64, 128
_MAX_BOX = 256
_MAX_DIM = 1 << 32
_MAX_STRIDE = 1 << 40


class TmaLayoutError(ValueError):
    pass


@dataclass(frozen=True)
class Tma2dParams:
    """A row-major 2-D view: `inner` contiguous elements per row, `outer` rows `row_stride_bytes`
    apart, loaded/stored as boxes of `box_inner` x `box_outer` elements with `swizzle` bytes."""
    element_size: int
    inner: int
    outer: int
    row_stride_bytes: int
    box_inner: int
    box_outer: int
    swizzle: int

    def __post_init__(self):
        if self.element_size not in (1, 2, 4):
            raise TmaLayoutError(f"element size must be 1, 2 or 4 bytes, got {self.element_size}")
        if not (0 < self.inner < _MAX_DIM and 0 < self.outer < _MAX_DIM):
            raise TmaLayoutError(f"dims must be in [1, 2^32), got {self.inner} x {self.outer}")
        if self.row_stride_bytes % 16 or not (0 < self.row_stride_bytes < _MAX_STRIDE):
            raise TmaLayoutError(f"row stride must be a positive multiple of 16 bytes below 2^40, "
                                 f"got {self.row_stride_bytes}")
        if self.row_stride_bytes < self.inner * self.element_size:
            raise TmaLayoutError(f"row stride ({self.row_stride_bytes} B) is shorter than a row "
                                 f"({self.inner * self.element_size} B)")
        if not (0 < self.box_inner <= _MAX_BOX and 0 < self.box_outer <= _MAX_BOX):
            raise TmaLayoutError(f"box dims must be in [1, 256], got {self.box_inner} x {self.box_outer}")
        if (self.box_inner * self.element_size) % 16:
            raise TmaLayoutError(f"box rows must be a multiple of 16 bytes, got "
                                 f"{self.box_inner * self.element_size}")
        if self.swizzle not in (SWIZZLE_NONE, SWIZZLE_32B, SWIZZLE_64B, SWIZZLE_128B):
            raise TmaLayoutError(f"swizzle must be 0, 32, 64 or 128 bytes, got {self.swizzle}")
        if self.swizzle and self.box_inner * self.element_size > self.swizzle:
            raise TmaLayoutError(f"a {self.swizzle}-byte swizzle allows box rows of at most "
                                 f"{self.swizzle} bytes, got {self.box_inner * self.element_size}")

    @property
    def box_bytes(self) -> int:
        return self.box_inner * self.box_outer * self.element_size


def check_address(address: int, what: str) -> None:
    if address % 16:
        raise TmaLayoutError(f"{what}: TMA needs a 16-byte aligned address, got {address:#x}")


@functools.cache
def _driver_enums():
    from cuda.bindings import driver
    dtype = {1: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
             2: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
             4: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}
    swizzle = {SWIZZLE_NONE: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
               SWIZZLE_32B: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
               SWIZZLE_64B: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
               SWIZZLE_128B: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B}
    return driver, dtype, swizzle


# Raw element type is irrelevant to TMA except for its size (and OOB fill of NaN, unused here);
# bf16 stands for any 2-byte type, uint8 for fp8.
def encode(params: Tma2dParams, address: int) -> bytes:
    """The 128-byte CUtensorMap for `params` at `address` (needs the CUDA driver)."""
    check_address(address, "tensor")
    driver, dtypes, swizzles = _driver_enums()
    err, tensor_map = driver.cuTensorMapEncodeTiled(
        dtypes[params.element_size], 2, address,
        [driver.cuuint64_t(params.inner), driver.cuuint64_t(params.outer)],
        [driver.cuuint64_t(params.row_stride_bytes)],
        [driver.cuuint32_t(params.box_inner), driver.cuuint32_t(params.box_outer)],
        [driver.cuuint32_t(1), driver.cuuint32_t(1)],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzles[params.swizzle],
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise TmaLayoutError(f"cuTensorMapEncodeTiled failed ({err}) for {params} at {address:#x}")
    import ctypes
    return ctypes.string_at(tensor_map.getPtr(), 128)


class _CtypesEncoder:
    """cuTensorMapEncodeTiled straight from libcuda for one Tma2dParams, its argument arrays built
    once: a call writes the descriptor of a new address into a given buffer. Through cuda.bindings
    an encode costs ~10 us of host time on the H200 (profile_host.py, "descriptor miss"), most of
    it building the Python argument objects; this is a plain ctypes call."""

    def __init__(self, params: Tma2dParams, function):
        import ctypes
        driver, dtypes, swizzles = _driver_enums()
        self._function = function
        self._dims = (ctypes.c_uint64 * 2)(params.inner, params.outer)
        self._strides = (ctypes.c_uint64 * 1)(params.row_stride_bytes)
        self._box = (ctypes.c_uint32 * 2)(params.box_inner, params.box_outer)
        self._element_strides = (ctypes.c_uint32 * 2)(1, 1)
        self._enums = (
            ctypes.c_int(int(dtypes[params.element_size])), ctypes.c_uint32(2))
        self._tail = (
            ctypes.c_int(int(driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE)),
            ctypes.c_int(int(swizzles[params.swizzle])),
            ctypes.c_int(int(driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B)),
            ctypes.c_int(int(driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)))
        self._void_p = ctypes.c_void_p

    def __call__(self, buffer_address: int, address: int) -> int:
        return self._function(self._void_p(buffer_address), *self._enums, self._void_p(address),
                              self._dims, self._strides, self._box, self._element_strides,
                              *self._tail)


@functools.cache
def _libcuda_encode():
    """libcuda's cuTensorMapEncodeTiled for ctypes, or None (then cuda.bindings encodes)."""
    import ctypes
    try:
        function = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    return function


class DescriptorCache:
    """Encoded descriptors of one operand layout, by base address, in host buffers.

    `__call__(address)` returns the address of the 128-byte descriptor (64-byte aligned, as the
    driver's CUtensorMap is, inside a 192-byte host buffer); launchers
    point their kernel-parameter slot at it instead of copying bytes (the driver copies parameters
    during the launch call, so the buffer only has to live that long). Weights, benchmark loops
    and graph replays hit; a full cache is dropped, so fresh activations cannot grow it forever.
    """
    MAX_ENTRIES = 256

    def __init__(self, params: Tma2dParams):
        self.params = params
        self._buffers: dict[int, tuple] = {}
        self._encoder = None

    def __call__(self, address: int) -> int:
        found = self._buffers.get(address)
        if found is not None:
            return found[1]
        return self._miss(address)

    def _miss(self, address: int) -> int:
        if len(self._buffers) >= self.MAX_ENTRIES:
            self._buffers.clear()
        import ctypes
        if env_flag("DG_JIT_DEBUG"):
            print(f"[dg_triton JIT] TMA descriptor {self.params} at {address:#x}", file=sys.stderr)
        # CUtensorMap is a 64-byte aligned struct: the descriptor lives at the first 64-byte
        # boundary of a 192-byte buffer.
        buffer = ctypes.create_string_buffer(192)
        aligned = (ctypes.addressof(buffer) + 63) & ~63
        if self._encoder is None and _libcuda_encode() is not None:
            self._encoder = _CtypesEncoder(self.params, _libcuda_encode())
        if self._encoder is not None:
            check_address(address, "tensor")
            err = self._encoder(aligned, address)
            if err:
                from cuda.bindings import driver
                raise TmaLayoutError(f"cuTensorMapEncodeTiled failed ({driver.CUresult(err).name}) "
                                     f"for {self.params} at {address:#x}")
        else:
            ctypes.memmove(aligned, encode(self.params, address), 128)  # encode checks the address
        self._buffers[address] = (buffer, aligned)
        return aligned
