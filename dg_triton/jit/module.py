"""Loading cubins and launching their kernels with the CUDA driver API (cuda.bindings.driver).

One `Kernel` per (cubin, device); one `Launcher` per launch shape (grid, block, shared memory,
cluster, PDL). A Launcher builds its CUlaunchConfig and its parameter block once; a launch only
rewrites the parameter bytes and the stream and calls cuLaunchKernelEx, which keeps the per-call
host cost near the driver's own (TOOLCHAIN.md: ~5.7 us packed vs ~13 us rebuilt per call).
"""
import ctypes
import functools
import struct
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


# Parameter kinds: a 128-byte TMA descriptor passed by value (kernels take these first), a 32-bit
# unsigned integer, or a 64-bit value (a device pointer).
TMA, U32, U64 = "tma", "u32", "u64"


class _LaunchAttribute(ctypes.Structure):
    # CUlaunchAttribute (cuda.h): an enum id, padding to 8 bytes, a 64-byte value union.
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint32 * 16)]


class _LaunchConfig(ctypes.Structure):
    # CUlaunchConfig (cuda.h); ctypes applies the same natural alignment as the C compiler.
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


@functools.cache
def _libcuda_launch():
    """cuLaunchKernelEx straight from libcuda through ctypes. cuda.bindings converts its Python
    arguments on every call (~5.7 us on the H200 host, TOOLCHAIN.md); with the config struct and the
    parameter block built once, a ctypes call costs about a microsecond. None if libcuda cannot be
    opened this way, and then the cuda.bindings call is used."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        launch = libcuda.cuLaunchKernelEx
    except (OSError, AttributeError):
        return None
    # No argtypes: the Launcher passes ready ctypes objects, which skips ctypes' per-call argument
    # conversion (~0.5 us of the call on the H200's host, profile_host.py). A caller must pass
    # pointers as ctypes objects (c_void_p, pointer(...), None): a plain Python int would go as a
    # 32-bit C int, truncated, with no error.
    launch.restype = ctypes.c_int
    return launch


class Launcher:
    """One kernel at one launch shape. Call with the stream, the TMA descriptors' host-buffer
    addresses (see tma.DescriptorCache) and the scalar parameters, in the kernel's order."""

    def __init__(self, kernel: Kernel, grid: int, block: int, shared_memory: int,
                 param_kinds: tuple[str, ...], cluster: int = 1, pdl: bool = False):
        driver = _driver()
        kernel.allow_dynamic_shared_memory(shared_memory)
        self.kernel = kernel
        self.num_tma = sum(kind == TMA for kind in param_kinds)
        if param_kinds[:self.num_tma] != (TMA,) * self.num_tma:
            raise ValueError("TMA descriptor parameters must come first")
        scalar_kinds = param_kinds[self.num_tma:]

        # Parameter block: the void*[] the driver reads. TMA slots point at descriptor buffers
        # (rewritten per call); scalar slots point into one buffer, 8 bytes apart, filled with a
        # single struct.pack_into per call.
        self._scalar_format = "<" + "".join("I4x" if kind == U32 else "Q" for kind in scalar_kinds)
        self._scalars = ctypes.create_string_buffer(8 * max(1, len(scalar_kinds)))
        base = ctypes.addressof(self._scalars)
        self._pointers = (ctypes.c_void_p * len(param_kinds))(
            *([0] * self.num_tma), *[base + 8 * i for i in range(len(scalar_kinds))])
        self._pointers_address = ctypes.addressof(self._pointers)

        attributes = []
        if cluster > 1:
            attributes.append((int(driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION),
                               (cluster, 1, 1)))
        if pdl:
            attributes.append((int(driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION),
                               (1,)))
        self._attributes = (_LaunchAttribute * max(1, len(attributes)))()
        for slot, (attribute_id, values) in zip(self._attributes, attributes):
            slot.id = attribute_id
            for i, value in enumerate(values):
                slot.value[i] = value
        self._config = _LaunchConfig(grid, 1, 1, block, 1, 1, shared_memory, None,
                                     self._attributes, len(attributes))
        self._config_pointer = ctypes.pointer(self._config)
        self._function = int(kernel.function)
        self._function_arg = ctypes.c_void_p(self._function)
        self._pointers_arg = ctypes.c_void_p(self._pointers_address)
        self._launch = _libcuda_launch()
        if self._launch is None:
            self._fallback_config = self._bindings_config(driver, grid, block, shared_memory, cluster, pdl)
        self.description = (f"{kernel.name}: grid {grid}, block {block}, smem {shared_memory}, "
                            f"cluster {cluster}, pdl {pdl}")
        if env_flag("DG_JIT_DEBUG"):
            print(f"[dg_triton JIT] launcher {self.description}", file=sys.stderr)

    @staticmethod
    def _bindings_config(driver, grid, block, shared_memory, cluster, pdl):
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
        return config

    def __call__(self, stream: int, descriptors: tuple, *scalars) -> None:
        self._pointers[:self.num_tma] = descriptors
        struct.pack_into(self._scalar_format, self._scalars, 0, *scalars)
        if self._launch is not None:
            self._config.hStream = stream
            err = self._launch(self._config_pointer, self._function_arg, self._pointers_arg, None)
            if err:
                self._raise(err)
        else:
            self._fallback_config.hStream = stream
            (err,) = _driver().cuLaunchKernelEx(self._fallback_config, self.kernel.function,
                                                self._pointers_address, 0)
            check(err, f"cuLaunchKernelEx({self.description})")

    def _raise(self, code: int) -> None:
        driver = _driver()
        check(driver.CUresult(code), f"cuLaunchKernelEx({self.description})")
