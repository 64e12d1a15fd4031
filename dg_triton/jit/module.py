"""Loading cubins and launching their kernels with the CUDA driver API (cuda.bindings.driver).

One `Kernel` per (cubin, device); one `Launcher` per launch shape (grid, block, shared memory,
cluster, PDL). A Launcher builds its CUlaunchConfig and its parameter block once; a launch only
rewrites the parameter bytes and the stream and calls cuLaunchKernelEx, which keeps the per-call
host cost near the driver's own (TOOLCHAIN.md: ~5.7 us packed vs ~13 us rebuilt per call).
"""
import ctypes
import functools
import sys
import time

from dg_triton.env import env_flag


class CudaDriverError(RuntimeError):
    pass


@functools.cache
def _driver():
    from cuda.bindings import driver
    (err,) = driver.cuInit(0)
    check(err, "cuInit")
    return driver


def check(err, what: str) -> None:
    from cuda.bindings import driver
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise CudaDriverError(f"dg_triton: {what} failed: {name.decode() if name else err}")


@functools.cache
def _primary_context(device_index: int):
    driver = _driver()
    err, device = driver.cuDeviceGet(device_index)
    check(err, "cuDeviceGet")
    err, context = driver.cuDevicePrimaryCtxRetain(device)
    check(err, "cuDevicePrimaryCtxRetain")
    return context


def _make_current(device_index: int) -> None:
    # torch works in the primary context; make it current for module loads from any thread.
    driver = _driver()
    (err,) = driver.cuCtxSetCurrent(_primary_context(device_index))
    check(err, "cuCtxSetCurrent")


class Kernel:
    """A kernel function loaded from a cubin into one device's primary context."""

    def __init__(self, cubin: bytes, symbol: str, device_index: int, name: str = ""):
        driver = _driver()
        _make_current(device_index)
        start = time.perf_counter()
        err, self.module = driver.cuModuleLoadData(cubin)
        check(err, f"cuModuleLoadData({name or symbol})")
        err, self.function = driver.cuModuleGetFunction(self.module, symbol.encode())
        check(err, f"cuModuleGetFunction({symbol})")
        self.load_seconds = time.perf_counter() - start
        self.name = name or symbol
        self.device_index = device_index
        self._max_dynamic_smem = 0
        if env_flag("DG_JIT_DEBUG") or env_flag("DG_JIT_PRINT_LOAD_TIME"):
            print(f"[dg_triton JIT] loaded {self.name} (symbol {symbol}) on cuda:{device_index} "
                  f"in {self.load_seconds * 1e3:.2f} ms", file=sys.stderr)

    def allow_dynamic_shared_memory(self, num_bytes: int) -> None:
        if num_bytes > self._max_dynamic_smem:
            driver = _driver()
            attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            (err,) = driver.cuFuncSetAttribute(self.function, attribute, num_bytes)
            check(err, f"cuFuncSetAttribute(max dynamic shared memory = {num_bytes}) for {self.name}")
            self._max_dynamic_smem = num_bytes


# Parameter kinds: a 128-byte TMA descriptor passed by value, or a 32-bit unsigned integer.
TMA, U32 = "tma", "u32"


class Launcher:
    def __init__(self, kernel: Kernel, grid: int, block: int, shared_memory: int,
                 param_kinds: tuple[str, ...], cluster: int = 1, pdl: bool = False):
        driver = _driver()
        kernel.allow_dynamic_shared_memory(shared_memory)
        self.kernel = kernel
        self.param_kinds = param_kinds
        config = driver.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
        config.sharedMemBytes = shared_memory
        attributes = []
        if cluster > 1:
            attribute = driver.CUlaunchAttribute()
            attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attribute.value.clusterDim.x, attribute.value.clusterDim.y = cluster, 1
            attribute.value.clusterDim.z = 1
            attributes.append(attribute)
        if pdl:
            attribute = driver.CUlaunchAttribute()
            attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attribute.value.programmaticStreamSerializationAllowed = 1
            attributes.append(attribute)
        config.attrs = attributes
        config.numAttrs = len(attributes)
        self.config = config
        self._launch = driver.cuLaunchKernelEx
        self._success = driver.CUresult.CUDA_SUCCESS
        # Parameter block: one storage slot per parameter and the void*[] the driver reads.
        self._slots = [ctypes.create_string_buffer(128) if kind == TMA else ctypes.c_uint32()
                       for kind in param_kinds]
        self._pointers = (ctypes.c_void_p * len(param_kinds))(
            *[ctypes.addressof(slot) for slot in self._slots])
        self._pointers_address = ctypes.addressof(self._pointers)
        self._stream = 0
        self.description = (f"{kernel.name}: grid {grid}, block {block}, smem {shared_memory}, "
                            f"cluster {cluster}, pdl {pdl}")

    def __call__(self, stream: int, *values) -> None:
        slots = self._slots
        for index, value in enumerate(values):
            if type(value) is bytes:
                ctypes.memmove(slots[index], value, 128)
            else:
                slots[index].value = value
        if stream != self._stream:
            self.config.hStream = stream
            self._stream = stream
        (err,) = self._launch(self.config, self.kernel.function, self._pointers_address, 0)
        if err != self._success:
            check(err, f"cuLaunchKernelEx({self.description})")
