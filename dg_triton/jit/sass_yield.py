"""Rewrite the yield hints of the FP32 FMAs in an sm_90a cubin (a post-compile pass).

Why: the FP8 GEMM promotes each K block's wgmma partial sums into the FP32 accumulators with a run
of 32-64 FFMAs per warp. While one consumer warpgroup runs that promotion, the other one's warps
on the same schedulers want to issue their next wgmmas; the scheduler keeps issuing the current
warp's FFMAs unless an instruction's control bits say it may switch (the "yield" hint). ptxas
marks every other FFMA of such a run (the ones whose operand is not kept in the reuse cache).
DeepGEMM reported 10 %+ on fine-grained FP8 GEMMs from marking more of them. This module does it
on our cubins so the effect can be measured (benchmarks/probe_fp8.py) and, where it pays, shipped.

Facts used (SASS encoding of sm_70 and later; checked against cuobjdump on our own kernels):
- an instruction is 16 bytes, two little-endian 64-bit words; the low 12 bits of the first word
  are the opcode: 0x223 is FFMA with three register sources;
- the second word's bits 41-63 are the scheduling control: bit 45 set = "do not yield" (ptxas sets
  it on the FFMAs that use the reuse cache), bits 58-61 = the four operand-reuse flags.
A yielding instruction must not keep operands in the reuse cache (another warp may run before the
next instruction reads it), so every FFMA made to yield also loses its reuse flags. Neither bit
changes what an instruction computes: a patched kernel's results are bitwise those of the original
(the GPU test compares them).
"""
import struct

FFMA_OPCODE = 0x223
_OPCODE_MASK = 0xFFF
_NO_YIELD = 1 << 45
_REUSE = 0xF << 58
_INSTRUCTION = 16
MIN_RUN = 8          # shorter FFMA runs are not promotion runs (address math, epilogue scaling)

POLICIES = ("front", "all", "none")


def text_sections(cubin: bytes) -> list[tuple[str, int, int]]:
    """(name, file offset, size) of every `.text.*` section of an ELF64 little-endian cubin."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def header(index):
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", cubin,
                                                                     shoff + index * shentsize)
        return name, offset, size

    _, strings_offset, _ = header(shstrndx)
    sections = []
    for index in range(shnum):
        name_offset, offset, size = header(index)
        end = cubin.index(b"\x00", strings_offset + name_offset)
        name = cubin[strings_offset + name_offset:end].decode()
        if name.startswith(".text."):
            sections.append((name, offset, size))
    return sections


def _words(code: bytearray, position: int) -> tuple[int, int]:
    return struct.unpack_from("<QQ", code, position)


def ffma_runs(cubin: bytes) -> list[tuple[int, int]]:
    """(file offset of the first FFMA, number of FFMAs) of every run of at least MIN_RUN
    consecutive register-register FFMAs."""
    runs = []
    for _, offset, size in text_sections(cubin):
        start, length = None, 0
        for position in range(offset, offset + size, _INSTRUCTION):
            low, _ = _words(cubin, position)
            if low & _OPCODE_MASK == FFMA_OPCODE:
                if start is None:
                    start = position
                length += 1
                continue
            if start is not None and length >= MIN_RUN:
                runs.append((start, length))
            start, length = None, 0
        if start is not None and length >= MIN_RUN:
            runs.append((start, length))
    return runs


def yields(cubin: bytes, position: int) -> bool:
    _, high = _words(cubin, position)
    return not high & _NO_YIELD


def set_ffma_yield(cubin: bytes, policy: str) -> bytes:
    """A copy of `cubin` whose promotion-run FFMAs follow `policy`:
    "front": every FFMA of a run's first half yields (the rest keep ptxas's alternation);
    "all":   every FFMA of a run yields;
    "none":  no FFMA of a run yields (reuse flags kept: a control for the measurement)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    code = bytearray(cubin)
    for start, length in ffma_runs(cubin):
        count = (length + 1) // 2 if policy == "front" else length
        for index in range(count):
            position = start + index * _INSTRUCTION
            low, high = _words(code, position)
            if policy == "none":
                high |= _NO_YIELD
            else:
                high &= ~(_NO_YIELD | _REUSE)
            struct.pack_into("<QQ", code, position, low, high)
    return bytes(code)
