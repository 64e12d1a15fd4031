"""Config choice for the SM90 kernels. Kernels never choose; they take what this module returns.

The BF16 GEMM model: a persistent grid of `num_sms` CTAs walks `ceil(M/BM) * ceil(N/BN)` tiles,
so time ~ the tiles of the busiest SM times one tile's time, where a tile is bound either by its
tensor-core work (bigger wgmma N and two consumer warpgroups run closer to peak) or by the bytes it
pulls through L2. Each candidate is scored by that estimate and the cheapest wins; ties go to the
larger tile (fewer bytes per FLOP). Figures are leads from the H200 (ANCHORS.md), recalibrated by the
sweeps recorded in benchmarks/NOTES.md.
"""
import math
from dataclasses import dataclass

SMEM_LIMIT = 232448          # bytes of dynamic shared memory per CTA on SM90 (227 KB)
BLOCK_K_BF16 = 64            # 128 bytes of K per stage row: one 128B-swizzle row
MAX_STAGES = 8

# Fraction of the tensor-core peak one CTA's tile shape sustains. A 64-row tile has one consumer
# warpgroup, so nothing hides its epilogue and issue gaps; wgmma N below 128 re-reads A from shared
# memory per 8 columns more often than the 128 B/clk it can serve.
_TILE_EFFICIENCY = {
    (128, 256): 1.00, (128, 192): 0.97, (128, 128): 0.90, (128, 64): 0.70,
    (64, 256): 0.80, (64, 192): 0.78, (64, 128): 0.72, (64, 64): 0.55,
}
_PEAK_FLOPS_PER_SM_CYCLE = 4096.0   # dense BF16 wgmma, per SM per clock
_L2_BYTES_PER_SM_CYCLE = 48.0       # sustained L2 -> SM with many SMs reading (lead)
_HBM_BYTES_PER_CYCLE = 4.2e12 / 1.8e9


@dataclass(frozen=True)
class Bf16GemmConfig:
    block_m: int
    block_n: int
    num_stages: int
    group_m: int
    num_sms: int          # persistent grid size (<= tiles)

    @property
    def num_threads(self) -> int:
        return 128 * (1 + self.block_m // 64)


def bf16_gemm_shared_memory(block_m: int, block_n: int, num_stages: int, out_bytes: int) -> int:
    """Bytes of dynamic shared memory the kernel asks for (mirrors Bf16GemmTraits::kSmemBytes)."""
    stage = (block_m + block_n) * BLOCK_K_BF16 * 2
    staging = block_m * block_n * out_bytes
    barriers = (2 * num_stages + block_m // 64) * 8
    return num_stages * stage + staging + barriers + 1024


def _max_stages(block_m: int, block_n: int, out_bytes: int) -> int:
    stage = (block_m + block_n) * BLOCK_K_BF16 * 2
    fixed = bf16_gemm_shared_memory(block_m, block_n, 0, out_bytes)
    return min((SMEM_LIMIT - fixed - 16 * 8) // stage, MAX_STAGES)


def bf16_gemm_candidates(m: int, n: int, block_n_multiple: int = 1):
    block_ms = (64,) if m <= 64 else (64, 128)
    step = math.lcm(64, block_n_multiple)
    block_ns = [bn for bn in (64, 128, 192, 256) if bn % step == 0]
    return [(bm, bn) for bm in block_ms for bn in block_ns]


def estimate_cycles(m: int, n: int, k: int, block_m: int, block_n: int, num_sms: int) -> float:
    tiles = math.ceil(m / block_m) * math.ceil(n / block_n)
    busiest_sm_tiles = math.ceil(tiles / num_sms)
    k_padded = math.ceil(k / BLOCK_K_BF16) * BLOCK_K_BF16
    compute = busiest_sm_tiles * 2 * block_m * block_n * k_padded / (
        _PEAK_FLOPS_PER_SM_CYCLE * _TILE_EFFICIENCY[(block_m, block_n)])
    l2 = busiest_sm_tiles * (block_m + block_n) * k_padded * 2 / _L2_BYTES_PER_SM_CYCLE
    hbm = (m * k + n * k) * 2 / _HBM_BYTES_PER_CYCLE
    # Each tile's start (pipeline fill) and epilogue are not hidden for the first and last tile.
    fill = 2000.0
    return max(compute, l2, hbm) + fill


def choose_bf16_gemm_config(m: int, n: int, k: int, out_bytes: int, num_sms: int,
                            block_n_multiple: int = 1) -> Bf16GemmConfig:
    best = None
    for block_m, block_n in bf16_gemm_candidates(m, n, block_n_multiple):
        stages = _max_stages(block_m, block_n, out_bytes)
        if stages < 3:
            continue
        cycles = estimate_cycles(m, n, k, block_m, block_n, num_sms)
        score = (cycles, -(block_m * block_n))
        if best is None or score < best[0]:
            best = (score, block_m, block_n, stages)
    if best is None:
        raise RuntimeError(f"no SM90 BF16 GEMM config fits shared memory for m={m} n={n} k={k}")
    _, block_m, block_n, stages = best
    tiles = math.ceil(m / block_m) * math.ceil(n / block_n)
    return Bf16GemmConfig(block_m=block_m, block_n=block_n, num_stages=stages,
                          group_m=8, num_sms=min(num_sms, tiles))
