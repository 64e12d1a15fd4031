"""Config choice for the SM90 kernels. Kernels never choose; they take what this module returns.

BF16 GEMM. A persistent grid of `num_sms` CTAs walks `tiles * num_splits` work units (a unit is a
tile, or with split-K one K-slice of a tile), so the time is about the units of the busiest SM
times one unit's time. A unit is bound by its tensor-core work or by the bytes it pulls from L2:

- tensor cores: 2*BM*BN*K' FLOPs at `PEAK` per SM per clock, times an efficiency that falls for
  narrow tiles: each m64nNk16 wgmma reads A (2 KB) and B (32*N bytes) from shared memory, which
  serves 128 B/clock, so N below ~96 starves the tensor core; one consumer warpgroup (BM = 64)
  hides less of its issue and epilogue time than two;
- L2: (BM + BN) * K' * 2 bytes per unit at `L2_BYTES_PER_CLOCK` per SM.
Split-K adds the partial write and the last CTA's read of all partials, and a fixed cost.
Among candidates the cheapest estimate wins; ties go to the larger tile. The constants were fitted
to the H200 sweeps recorded in benchmarks/NOTES.md; `autotune_configs/sm90/bf16_gemm.json` holds
measured winners for the benchmark shapes, used when present (`tuned_config`).
"""
import functools
import math
from dataclasses import dataclass, replace

from dg_triton import tuned_files
from dg_triton.paths import autotune_configs_dir

SMEM_LIMIT = 232448          # bytes of dynamic shared memory per CTA on SM90 (227 KB)
BLOCK_K_BF16 = 64            # 128 bytes of K per stage row: one 128B-swizzle row
MAX_STAGES = 8
MAX_SPLITS = 16

PEAK_FLOPS_PER_CLOCK = 4096.0      # dense BF16 wgmma per SM
L2_BYTES_PER_CLOCK = 64.0          # sustained L2 -> SM per SM with all SMs reading (fitted)
HBM_BYTES_PER_CLOCK = 4.2e12 / 1.8e9
UNIT_OVERHEAD_CLOCKS = 3000.0      # pipeline fill + epilogue not hidden behind the next unit
SPLIT_OVERHEAD_CLOCKS = 4000.0     # counter round trip and the last CTA's reduction latency
# Block rows per band of the persistent tile order (scheduler.cuh) in every config make_config
# returns; with_l2_group may widen it.
DEFAULT_L2_GROUP = 8


@dataclass(frozen=True)
class Bf16GemmConfig:
    block_m: int
    block_n: int
    num_stages: int
    group_m: int
    num_sms: int          # persistent grid size (<= work units, a multiple of the cluster size)
    num_splits: int = 1   # K-slices per tile (split-K) when > 1
    cluster_n: int = 1    # CTAs per cluster along N sharing A by TMA multicast (1 or 2)
    cluster_m: int = 1    # CTAs per cluster along M sharing B by TMA multicast (1 or 2)
    stream_k: bool = False  # the last, partial wave's K blocks spread over every CTA (with_stream_k)
    # M-grouped FP8 only: a 64-row tile whose two consumer warpgroups take its two column halves
    # (fp8_gemm.cuh kSplitColumns; make_fp8_split_columns_config)
    split_columns: bool = False

    @property
    def num_threads(self) -> int:
        return 128 * (1 + (2 if self.split_columns else consumer_warpgroups(self.block_m)))

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n


def consumer_warpgroups(block_m: int) -> int:
    """Mirrors the traits' kNumMathWarpgroups: one per 64 rows, at most two (a 256-row FP8 tile
    gives each two 64-row waves)."""
    return min(block_m // 64, 2)


def epilogue_swizzle_bytes(block_n: int, out_bytes: int) -> int:
    """Mirrors SwizzledTmaStoreEpilogue::kSwizzleBytes: the widest span dividing a tile row."""
    row = block_n * out_bytes
    return 128 if row % 128 == 0 else 64 if row % 64 == 0 else 32


def epilogue_staging_cols(block_n: int, out_bytes: int, max_chunk_slabs: int | None = None,
                          accumulate: bool = False) -> int:
    """Mirrors SwizzledTmaStoreEpilogue::kChunkCols: rows wider than 256 bytes with an even number
    of swizzle slabs are staged half at a time, unless `accumulate` (an FP8 tile reading c: the
    FP8 kernel's kWholeRowsForC) and `max_chunk_slabs` (the room the ring leaves; None: unlimited)
    holds whole rows; that room narrows the chunks further, to at least one slab."""
    row = block_n * out_bytes
    slab_cols = epilogue_swizzle_bytes(block_n, out_bytes) // out_bytes
    slabs = block_n // slab_cols
    whole_rows = accumulate and (max_chunk_slabs is None or max_chunk_slabs >= slabs)
    chunk = slabs // 2 if row > 256 and slabs % 2 == 0 and not whole_rows else slabs
    if max_chunk_slabs is not None:
        chunk = max(1, min(chunk, max_chunk_slabs))
    return chunk * slab_cols


def _non_staging_shared_memory(block_m: int, block_n: int, num_stages: int,
                               extra_stage_bytes: int) -> int:
    """The kernels' shared memory besides the epilogue staging (traits' kNonStagingBytes): the
    ring, its barriers, the split-K flags, the 1024-byte alignment slack."""
    warpgroups = consumer_warpgroups(block_m)
    stage = (block_m + block_n) * BLOCK_K_BF16 * 2 + extra_stage_bytes
    return num_stages * stage + (2 * num_stages + warpgroups) * 8 + warpgroups * 4 + 1024


def epilogue_chunk_cols(block_m: int, block_n: int, num_stages: int, out_bytes: int,
                        extra_stage_bytes: int = 0, accumulate: bool = False) -> int:
    """Columns the epilogue stages at once beside a ring of `num_stages` (mirrors the traits'
    kMaxChunkSlabs): its default chunks where they fit (whole rows for an accumulating tile
    where those fit), else as many whole slabs as fit."""
    slab_bytes = 64 * epilogue_swizzle_bytes(block_n, out_bytes)   # one 64-row slice's slab
    room = SMEM_LIMIT - _non_staging_shared_memory(block_m, block_n, num_stages, extra_stage_bytes)
    return epilogue_staging_cols(block_n, out_bytes, max(0, room) // (block_m // 64 * slab_bytes),
                                 accumulate)


def bf16_gemm_shared_memory(block_m: int, block_n: int, num_stages: int, out_bytes: int,
                            split_k: bool = False, extra_stage_bytes: int = 0,
                            accumulate: bool = False) -> int:
    """Bytes of dynamic shared memory the kernel asks for (mirrors Bf16GemmTraits::kSmemBytes;
    `extra_stage_bytes`: a family's per-stage extras, e.g. the FP8 kernel's scales; `accumulate`:
    an FP8 tile reads c, which may widen its staging, epilogue_staging_cols)."""
    non_staging = _non_staging_shared_memory(block_m, block_n, num_stages, extra_stage_bytes)
    if split_k:   # split-K reduces through global memory: no staging
        return non_staging
    return non_staging + block_m * out_bytes * epilogue_chunk_cols(block_m, block_n, num_stages,
                                                                   out_bytes, extra_stage_bytes,
                                                                   accumulate)


def max_stages(block_m: int, block_n: int, out_bytes: int, split_k: bool = False,
               extra_stage_bytes: int = 0, cap: int | None = None,
               narrow_staging: bool = False) -> int:
    """The most stages that fit shared memory, at most `cap` (MAX_STAGES when None): beside the
    epilogue's default staging, or with `narrow_staging` beside chunks as narrow as one slab."""
    cap = MAX_STAGES if cap is None else cap
    if narrow_staging:
        fits = [s for s in range(1, cap + 1)
                if bf16_gemm_shared_memory(block_m, block_n, s, out_bytes, split_k,
                                           extra_stage_bytes) <= SMEM_LIMIT]
        return max(fits, default=0)
    stage = (block_m + block_n) * BLOCK_K_BF16 * 2 + extra_stage_bytes
    fixed = bf16_gemm_shared_memory(block_m, block_n, 0, out_bytes, split_k)
    return min((SMEM_LIMIT - fixed - 16 * 8) // stage, cap)


# Deeper pipelines for the dense GEMMs (with_pipeline_depth): up to DEEP_PIPELINE_STAGES stages at
# K >= DEEP_PIPELINE_MIN_K when B is at most DEEP_PIPELINE_MAX_B_BYTES.
DEEP_PIPELINE_STAGES = 12
DEEP_PIPELINE_MIN_K = 4096
DEEP_PIPELINE_MAX_B_BYTES = 64 << 20
# Under the same conditions, a BF16 128-row tile with a BF16 D and no c whose ring shared memory
# caps below MAX_STAGES takes one stage more where the epilogue, staging in at most two chunks of
# swizzle slabs a row, leaves room (128x144: 5 -> 6 stages, staging 80 then 64 of its 144
# columns; 128x176: 4 -> 5, 128 then 48). Narrower staging (three or more chunks: 128x160,
# 128x192, 128x208), 64-row tiles, FP32 D and c were not measured and keep their rings.
# Measured on the H100 (2026-12-05, NOTES.md session 23, results/probe_deep_staging-h100.txt):
# 4096x576x7168 +4.2 % (both rounds), 4096x2112x7168 -2.1 / +0.9 %; cuBLAS runs those tiles with 6
# and 5 stages. The FP8 1D2D tiles measured no gain (0 to -2.7 %), so they keep their rings.
NARROW_STAGING_FOR_DEPTH = True


def with_pipeline_depth(config: Bf16GemmConfig, n: int, k: int, b_element_bytes: int,
                        out_bytes: int, extra_stage_bytes: int = 0,
                        narrow_staging: bool = False) -> Bf16GemmConfig:
    """`config` with up to DEEP_PIPELINE_STAGES stages instead of MAX_STAGES where shared memory
    has room (narrow tiles: 64x16..64x64) and the problem waits on L2 -> SM latency rather than on
    HBM bandwidth: K >= DEEP_PIPELINE_MIN_K, and B, the operand that streams from memory at small M,
    at most DEEP_PIPELINE_MAX_B_BYTES. Measured on the H200 (benchmarks/NOTES.md session 21,
    results/probe_stages-h200.txt), 12 stages against 8: FP8 1D2D 64x4096x7168 +6.7 %,
    128x4096x7168 +6.5 %, 64/128x2112x7168 +3.4 / +2.5 %, 64/128x576x7168 +2.6 / +3.3 %; BF16
    128x4096x7168 +12.8 % (B 59 MB), 128x2112x7168 +7.8 %, 64/128x576x7168 +4.7 / +4.6 %, the other
    K = 7168 ones within 0.2 %. Left at 8: K <= 2048 (1.3-2.5 % slower with 12, where a tile's
    whole K loop is a few stages) and B of 117-235 MB at K = 16384 (0.7-2.2 % slower: HBM-bound).
    With `narrow_staging` (the BF16 GEMMs with a BF16 D and no c), a 128-row tile whose ring
    shared memory caps below MAX_STAGES gets one stage more where epilogue staging in at most two
    chunks a row makes room (NARROW_STAGING_FOR_DEPTH)."""
    if k < DEEP_PIPELINE_MIN_K or n * k * b_element_bytes > DEEP_PIPELINE_MAX_B_BYTES:
        return config
    if config.num_stages < MAX_STAGES:
        # What was measured (NARROW_STAGING_FOR_DEPTH): 128-row tiles, 16-bit D without c, one
        # stage more where the narrower staging takes at most two chunks a row.
        if (not (narrow_staging and NARROW_STAGING_FOR_DEPTH) or config.block_m != 128
                or config.num_splits > 1 or out_bytes != 2):
            return config
        stages = max_stages(config.block_m, config.block_n, out_bytes, False, extra_stage_bytes,
                            cap=config.num_stages + 1, narrow_staging=True)
        chunk = epilogue_chunk_cols(config.block_m, config.block_n, stages, out_bytes, extra_stage_bytes)
        if stages <= config.num_stages or 2 * chunk < config.block_n:
            return config
        return replace(config, num_stages=stages)
    stages = max_stages(config.block_m, config.block_n, out_bytes, config.num_splits > 1,
                        extra_stage_bytes, cap=DEEP_PIPELINE_STAGES)
    return replace(config, num_stages=max(stages, config.num_stages))


def _block_n_step(b_k_major: bool, block_n_multiple: int) -> int:
    """Block N's step: 16 columns (whole 64-column atoms when B is MN-major), times what
    set_block_size_multiple_of's N multiple adds."""
    return math.lcm(16 if b_k_major else 64, block_n_multiple)


def _block_n_multiple_hint(block_n_multiple: int, b_k_major: bool = True) -> str:
    """What a failed config choice says when set_block_size_multiple_of narrowed the block Ns: a
    step past 256 leaves none, and the user should see why."""
    if block_n_multiple == 1:
        return ""
    return (f" (set_block_size_multiple_of's N multiple is {block_n_multiple}: block N must be a "
            f"multiple of {_block_n_step(b_k_major, block_n_multiple)}, and SM90 tiles are at most "
            f"256 wide)")


def bf16_gemm_candidates(m: int, n: int, b_k_major: bool = True, block_n_multiple: int = 1):
    """(block_m, block_n) pairs: BM 64 or 128 (one or two consumer warpgroups), BN in steps of
    lcm(16, multiple) up to 256 (whole 64-column atoms when B is MN-major), no wider than N needs."""
    block_ms = (64,) if m <= 64 else (64, 128)
    step = _block_n_step(b_k_major, block_n_multiple)
    widest = max(step, min(256, -(-n // step) * step))
    return [(bm, bn) for bm in block_ms for bn in range(step, widest + 1, step) if bn <= 256]


def _tensor_core_efficiency(block_m: int, block_n: int) -> float:
    shared_memory_demand = 4096.0 / block_n + 64.0   # bytes per clock at peak FLOPs
    base = 0.82 if block_m == 128 else 0.75
    return base * min(1.0, 100.0 / shared_memory_demand)


def estimate_cycles(m: int, n: int, k: int, block_m: int, block_n: int, num_splits: int,
                    num_sms: int, efficiency=None) -> float:
    tiles = math.ceil(m / block_m) * math.ceil(n / block_n)
    k_blocks = math.ceil(k / BLOCK_K_BF16)
    k_slice = math.ceil(k_blocks / num_splits) * BLOCK_K_BF16
    units = tiles * num_splits
    rounds = math.ceil(units / num_sms)
    compute = 2 * block_m * block_n * k_slice / (
        PEAK_FLOPS_PER_CLOCK * (efficiency or _tensor_core_efficiency)(block_m, block_n))
    l2 = (block_m + block_n) * k_slice * 2 / L2_BYTES_PER_CLOCK
    unit = max(compute, l2) + UNIT_OVERHEAD_CLOCKS
    hbm = (m * k + n * k) * 2 / HBM_BYTES_PER_CLOCK
    total = max(rounds * unit, hbm)
    if num_splits > 1:
        partial_bytes = block_m * block_n * 4
        total += SPLIT_OVERHEAD_CLOCKS + num_splits * partial_bytes / L2_BYTES_PER_CLOCK
    return total


def _valid_splits(k: int, num_splits: int) -> int:
    """The split count the scheduler will really run: every K-slice non-empty."""
    k_blocks = math.ceil(k / BLOCK_K_BF16)
    num_splits = max(1, min(num_splits, k_blocks))
    per_split = math.ceil(k_blocks / num_splits)
    return math.ceil(k_blocks / per_split)


def make_config(m: int, n: int, block_m: int, block_n: int, num_splits: int, k: int,
                out_bytes: int, num_sms: int, cluster_n: int = 1,
                cluster_m: int = 1, extra_stage_bytes: int = 0) -> Bf16GemmConfig | None:
    """A runnable config, or None: too few stages fit, the cluster is not 1 or 2 CTAs along one
    axis, or it does not divide the blocks along its axis (a cluster's CTAs take adjacent tiles)
    or the SMs."""
    num_splits = _valid_splits(k, num_splits)
    stages = max_stages(block_m, block_n, out_bytes, num_splits > 1, extra_stage_bytes)
    m_blocks, n_blocks = math.ceil(m / block_m), math.ceil(n / block_n)
    cluster = cluster_m * cluster_n
    if (stages < 3 or cluster not in (1, 2) or m_blocks % cluster_m or n_blocks % cluster_n
            or num_sms < cluster):
        return None
    units = m_blocks * n_blocks * num_splits
    grid = min(num_sms // cluster * cluster, units)
    return Bf16GemmConfig(block_m=block_m, block_n=block_n, num_stages=stages,
                          group_m=DEFAULT_L2_GROUP, num_sms=grid, num_splits=num_splits,
                          cluster_n=cluster_n, cluster_m=cluster_m)


# Stream-K for the last wave (scheduler.cuh, StreamKTileScheduler): where the tiles are not a
# whole number of waves, the tiles past the last whole wave are not run one per CTA; their K
# blocks, as one sequence, are cut into one equal range per CTA, and the tiles this splits are
# summed by SplitKEpilogue. Where STREAM_K is on, with_stream_k takes it when the grid has at least
# one whole wave, a tile has at least STREAM_K_MIN_K_BLOCKS K blocks, and each CTA's range is at
# least STREAM_K_MIN_RANGE of a tile's K blocks (a tile then has at most three pieces to sum).
# Off: on the H200 (2026-12-04, benchmarks/probe_stream_k.py, NOTES.md session 22) every shape it
# would take ran slower, 0.52-0.92x the same tiles run whole: the CTAs' ranges start at different
# K offsets, so CTAs that share an A or B block no longer read it at the same time (K-lockstep is
# what lets one HBM fetch serve them all from L2: at M = 128, K = 16384 the B stream doubled), and
# each CTA's last piece ends with a reduction through global memory on its critical path.
STREAM_K = False
STREAM_K_MIN_K_BLOCKS = 16
STREAM_K_MIN_RANGE = 0.5


@dataclass(frozen=True)
class StreamKPlan:
    """How StreamKTileScheduler splits a problem: `whole_tiles` run whole (a multiple of the
    grid), the remaining `sk_tiles` are split, at most `max_pieces` pieces a tile."""
    whole_tiles: int
    sk_tiles: int
    max_pieces: int


def stream_k_plan(num_tiles: int, k_blocks: int, grid: int) -> StreamKPlan:
    """Mirrors StreamKTileScheduler (scheduler.cuh): the tiles past the last whole wave, their K
    blocks cut into `grid` contiguous ranges, CTA c's starting at c * I // grid (I: those K
    blocks); a tile's pieces are held by the CTAs from its first K block's owner to its last's."""
    whole = num_tiles // grid * grid
    sk_tiles = num_tiles - whole
    iterations = sk_tiles * k_blocks

    def owner(x: int) -> int:
        return ((x + 1) * grid - 1) // iterations

    max_pieces = max((owner((t + 1) * k_blocks - 1) - owner(t * k_blocks) + 1
                      for t in range(sk_tiles)), default=0)
    return StreamKPlan(whole, sk_tiles, max_pieces)


# Whether a problem of fewer tiles than SMs (one partial wave: the grid is then as large as the
# tiles) may instead run every tile by stream-K on a grid of every SM. Off: 0.52-0.88x at M = 64
# and 128 on the H200 (same probe), where each CTA's reduction costs ~5 us of 11-45.
STREAM_K_PARTIAL_WAVE = False


def stream_k_grid(config: Bf16GemmConfig, m: int, n: int, k_blocks: int,
                  num_sms: int | None = None) -> int | None:
    """The grid with_stream_k runs this config on with stream-K, or None where it takes none
    (see STREAM_K_MIN_K_BLOCKS; `num_sms`, the SMs a grid may use, for STREAM_K_PARTIAL_WAVE)."""
    if (not STREAM_K or config.num_splits > 1 or config.cluster_size > 1 or config.block_m > 128
            or k_blocks < STREAM_K_MIN_K_BLOCKS):
        return None
    tiles = math.ceil(m / config.block_m) * math.ceil(n / config.block_n)
    grid = config.num_sms
    if tiles <= grid and STREAM_K_PARTIAL_WAVE and num_sms is not None and tiles < num_sms:
        grid = num_sms
    elif tiles <= grid or tiles % grid == 0:
        return None
    enough = (tiles % grid) * k_blocks >= grid * math.ceil(STREAM_K_MIN_RANGE * k_blocks)
    return grid if enough else None


def stream_k_pays(config: Bf16GemmConfig, m: int, n: int, k_blocks: int,
                  num_sms: int | None = None) -> bool:
    """Whether with_stream_k takes stream-K for this config."""
    return stream_k_grid(config, m, n, k_blocks, num_sms) is not None


def with_stream_k(config: Bf16GemmConfig, m: int, n: int, k_blocks: int,
                  num_sms: int | None = None) -> Bf16GemmConfig:
    """`config` with stream-K (and its grid) where stream_k_grid gives one, else unchanged."""
    grid = stream_k_grid(config, m, n, k_blocks, num_sms)
    return config if grid is None else replace(config, stream_k=True, num_sms=grid)


# The part of the L2 a wave's operands can be reused from by a later wave: fitted to Nsight
# Compute's DRAM reads on the H200 (2026-12-03, benchmarks/results/ncu_l2_group-h200.txt): 30 MB
# of its 50 (why not all of it is not measured; the benchmark's L2 flush leaves dirty lines, and
# the two L2 partitions may each keep a copy of a line).
L2_REUSE_BYTES = 30e6


def _merge(intervals):
    """Sorted, disjoint [lo, hi) intervals covering the same integers."""
    merged = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def _length(intervals) -> int:
    return sum(hi - lo for lo, hi in intervals)


def _overlap(a, b) -> int:
    """How many integers two merged interval lists share."""
    i = j = shared = 0
    while i < len(a) and j < len(b):
        shared += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return shared


def _wave_blocks(start: int, end: int, rows: int, cols: int, group_rows: int):
    """(A block rows, B block columns) that units [start, end) of the scheduler's order touch, as
    merged intervals. Mirrors PersistentTileScheduler::swizzle (scheduler.cuh): groups of
    group_rows block rows, each swept column by column."""
    row_spans, col_spans = [], []
    group = start // (group_rows * cols)
    while group * group_rows * cols < end:
        first, first_row = group * group_rows * cols, group * group_rows
        rows_in_group = min(rows - first_row, group_rows)
        lo, hi = max(start, first) - first, min(end, first + rows_in_group * cols) - first
        if hi - lo >= rows_in_group:
            row_spans.append((first_row, first_row + rows_in_group))
        elif lo % rows_in_group <= (hi - 1) % rows_in_group:
            row_spans.append((first_row + lo % rows_in_group, first_row + (hi - 1) % rows_in_group + 1))
        else:   # the range wraps from the group's last row to its first
            row_spans += [(first_row + lo % rows_in_group, first_row + rows_in_group),
                          (first_row, first_row + (hi - 1) % rows_in_group + 1)]
        col_spans.append((lo // rows_in_group, (hi - 1) // rows_in_group + 1))
        group += 1
    return _merge(row_spans), _merge(col_spans)


def tile_order_hbm_bytes(m: int, n: int, k: int, block_m: int, block_n: int, group_m: int,
                         grid: int, element_bytes: int, cluster_m: int = 1, cluster_n: int = 1,
                         l2_bytes: float = L2_REUSE_BYTES, max_waves: int | None = None) -> int:
    """HBM bytes of A and B that the persistent grid fetches in the scheduler's tile order (in
    its first `max_waves` waves, where given).

    A wave (`grid` consecutive units, all CTAs at about the same K) reads its distinct block rows
    of A and block columns of B, whole K. A block an earlier wave read is still in L2 when what
    the waves since then (this one included) touched fits in `l2_bytes`: every wave streams
    along K, so a block's K slice is reused after about that many bytes of other traffic. With
    l2_bytes = 0: no reuse between waves. Against Nsight Compute's DRAM reads on the H200
    (benchmarks/NOTES.md session 18): BF16 4096x4096x7168 exact at the five groups measured (1, 2,
    8, 16, 32), 11 of 12 configs within 16 %, the worst 26 % over (4096x32768x512 at group 2:
    509 MB modelled, 404 read)."""
    rows = math.ceil(m / block_m) // cluster_m
    cols = math.ceil(n / block_n) // cluster_n
    group_rows = max(1, group_m // cluster_m)
    units, per_wave = rows * cols, max(1, grid // (cluster_m * cluster_n))
    row_bytes = block_m * cluster_m * k * element_bytes
    col_bytes = block_n * cluster_n * k * element_bytes
    num_waves = -(-units // per_wave)
    if rows * row_bytes + cols * col_bytes <= l2_bytes and (max_waves is None or max_waves >= num_waves):
        return rows * row_bytes + cols * col_bytes   # everything fits: each block read once
    waves = [_wave_blocks(s, min(units, s + per_wave), rows, cols, group_rows)
             for s in range(0, units, per_wave)[:max_waves]]

    def size(block_rows, block_cols):
        return _length(block_rows) * row_bytes + _length(block_cols) * col_bytes

    total = 0
    for w, (wave_rows, wave_cols) in enumerate(waves):
        # A block last read by wave j is still in L2 if waves j+1..w together fit: walk back,
        # growing `recent` (waves j+1..w-1) while they fit beside this wave; the wave that no
        # longer fits was itself read recently enough to be reused. The walk stops early once
        # every block of this wave is found.
        recent_rows, recent_cols = [], []
        reusable_rows, reusable_cols = [], []
        wave_size = size(wave_rows, wave_cols)
        if wave_size <= l2_bytes:
            for j in range(w - 1, -1, -1):
                rows_j, cols_j = waves[j]
                with_rows, with_cols = _merge(recent_rows + rows_j), _merge(recent_cols + cols_j)
                reusable_rows, reusable_cols = with_rows, with_cols
                if (_overlap(wave_rows, with_rows) * row_bytes + _overlap(wave_cols, with_cols) * col_bytes
                        == wave_size):
                    break
                if size(_merge(with_rows + wave_rows), _merge(with_cols + wave_cols)) > l2_bytes:
                    break
                recent_rows, recent_cols = with_rows, with_cols
        hits = (_overlap(wave_rows, reusable_rows) * row_bytes
                + _overlap(wave_cols, reusable_cols) * col_bytes)
        total += wave_size - hits
    return total


# L2 groups with_l2_group may widen the default band to, for K up to L2_GROUP_MAX_K, where a
# group at most L2_GROUP_MIN_SAVING times group 8's modelled bytes is taken. The bytes compared
# are those of the first L2_GROUP_MODEL_WAVES waves (the order repeats band by band; this bounds
# the host time of a first call).
L2_GROUPS = (8, 16, 32)
L2_GROUP_MAX_K = 2048
L2_GROUP_MIN_SAVING = 0.5
L2_GROUP_MODEL_WAVES = 48


def with_l2_group(config: Bf16GemmConfig, m: int, n: int, k: int,
                  element_bytes: int) -> Bf16GemmConfig:
    """`config` with a wider L2 group where the model says it at least halves the HBM bytes,
    at K <= L2_GROUP_MAX_K; else unchanged (group 8). Measured on the H200 (benchmarks/NOTES.md
    session 18), group 32 against 8 over four probe runs: BF16 4096x24576x1536 +0.6..+6.6 %,
    4096x32768x512 +0.1..+2.7 % (Nsight Compute: 404 MB of DRAM reads at group 2, 38 at 32), FP8
    4096x24576x1536 -1.6..+3.1 %: A stays in L2 while a band of 32 block rows sweeps B. At long K
    the model's savings (4096x4096x7168 BF16: 327 -> 261 MB at group 16) moved no time in Nsight
    Compute, per-group times in the probe did not repeat from run to run, and FP8
    4096x4096x7168 at group 16 read 0.4-3 % slower in three runs: so long K and narrower groups
    are left alone. Split-K configs keep their group: their waves hold every tile of a K range;
    so does a config whose group is not the default (a tuned entry's)."""
    if config.num_splits > 1 or k > L2_GROUP_MAX_K or config.group_m != DEFAULT_L2_GROUP:
        return config
    fetched = {group: tile_order_hbm_bytes(m, n, k, config.block_m, config.block_n, group,
                                           config.num_sms, element_bytes, config.cluster_m,
                                           config.cluster_n, max_waves=L2_GROUP_MODEL_WAVES)
               for group in L2_GROUPS}
    group = min(L2_GROUPS, key=lambda g: (fetched[g], -g))
    if fetched[group] > L2_GROUP_MIN_SAVING * fetched[DEFAULT_L2_GROUP]:
        return config
    return replace(config, group_m=group)


# The fields of a tuned entry (dg_triton/tuned_files.py, backend "cuda") that must match a problem
# exactly, per family, in key order.
_TUNED_KEY_FIELDS = {"bf16_gemm": ("m", "n", "k", "out_bytes", "b_k_major", "num_sms"),
                     "fp8_gemm": ("kind", "m", "n", "k", "out_bytes", "num_sms")}


@functools.cache
def _load_tuned_table(family: str) -> dict:
    """autotune_configs/sm90/<family>.json as {key tuple: config dict}, or {} without the file."""
    try:
        path = autotune_configs_dir() / "sm90" / f"{family}.json"
    except FileNotFoundError:
        return {}
    document = tuned_files.read_document(path, "cuda")
    if document is None:
        return {}
    fields = _TUNED_KEY_FIELDS[family]
    try:
        return {tuple(entry[name] for name in fields): entry["config"] for entry in document["entries"]}
    except KeyError as error:
        raise ValueError(f"{path}: an entry lacks the key field {error}") from None


def _tuned_l2_group(config: Bf16GemmConfig | None, entry: dict) -> Bf16GemmConfig | None:
    """A tuned entry's config with the L2 group it was measured at: its "group_m", else 8 (the
    sweeps time group 8 only)."""
    if config is None or "group_m" not in entry:
        return config
    group = entry["group_m"]
    if not isinstance(group, int) or isinstance(group, bool) or not 1 <= group <= 256:
        raise ValueError(f"a tuned entry's group_m must be an int from 1 to 256, got {group!r} "
                         f"(entry {entry})")
    return replace(config, group_m=group)


def _tuned_table() -> dict:
    return _load_tuned_table("bf16_gemm")


def tuned_config(m, n, k, out_bytes, b_k_major, num_sms) -> Bf16GemmConfig | None:
    entry = _tuned_table().get((m, n, k, out_bytes, bool(b_k_major), num_sms))
    if entry is None:
        return None
    config = make_config(m, n, entry["block_m"], entry["block_n"], entry["num_splits"], k,
                         out_bytes, num_sms, entry.get("cluster_n", 1), entry.get("cluster_m", 1))
    return _tuned_l2_group(config, entry)


def choose_bf16_gemm_config(m: int, n: int, k: int, out_bytes: int, num_sms: int,
                            block_n_multiple: int = 1, b_k_major: bool = True,
                            allow_split_k: bool = True, accumulate: bool = False) -> Bf16GemmConfig:
    if block_n_multiple == 1:
        tuned = tuned_config(m, n, k, out_bytes, b_k_major, num_sms)
        if tuned is not None:
            deep = with_pipeline_depth(tuned, n, k, 2, out_bytes, narrow_staging=not accumulate)
            return with_stream_k(deep, m, n, math.ceil(k / BLOCK_K_BF16), num_sms)
    best = None
    for block_m, block_n in bf16_gemm_candidates(m, n, b_k_major, block_n_multiple):
        tiles = math.ceil(m / block_m) * math.ceil(n / block_n)
        # Split-K only pays when the tiles leave SMs idle.
        split_options = range(1, MAX_SPLITS + 1) if allow_split_k and tiles < num_sms else (1,)
        # Only cluster_n = 1: 2-CTA multicast clusters are built and tested but measured 0-20 %
        # slower than the same tiles without (probe_clusters.py, sweep4 log, 2026-11-29); a tuned
        # entry may still name one if it wins a sweep.
        for splits in split_options:
            config = make_config(m, n, block_m, block_n, splits, k, out_bytes, num_sms)
            if config is None or (splits > 1 and config.num_splits != splits):
                continue
            cycles = estimate_cycles(m, n, k, block_m, block_n, config.num_splits, num_sms)
            score = (cycles, config.num_splits, -(block_m * block_n))
            if best is None or score < best[0]:
                best = (score, config)
    if best is None:
        raise RuntimeError(f"no SM90 BF16 GEMM config fits shared memory for m={m} n={n} k={k}"
                           + _block_n_multiple_hint(block_n_multiple, b_k_major))
    return with_stream_k(with_pipeline_depth(with_l2_group(best[1], m, n, k, 2), n, k, 2, out_bytes,
                                             narrow_staging=not accumulate),
                         m, n, math.ceil(k / BLOCK_K_BF16), num_sms)


# FP8 (fp8_gemm.cuh): each consumer thread holds two sets of BLOCK_N / 2 FP32 values (the scaled
# accumulator and the block's raw wgmma partial sums), and with per-column B scales ("1d1d") also
# BLOCK_N / 4 scales, so BLOCK_N is capped below the BF16 kernel's 256 where ptxas would spill
# (measured with nvcc 13.0 / NVRTC 13.0: 1d2d spills at 256, 1d1d at 160; tests/test_compile_sm90_fp8.py).
FP8_MAX_BLOCK_N = {"1d2d": 192, "1d1d": 144}
# 256-row tiles (two 64-row waves per consumer warpgroup, fp8_gemm.cuh kRowWaves): 1D2D only, and
# block N up to 128 (two accumulator sets and a partial set: 3 x BLOCK_N / 2 FP32 per thread).
FP8_256_MAX_BLOCK_N = 128

# SM90's dense FP8 / BF16 GEMMs take the CUDA-core GEMV (dg_triton/triton/gemv.py) instead of the
# tensor-core kernel for M up to *_GEMV_MAX_M and K from *_GEMV_MIN_K. On the H200 (2026-12-02,
# benchmarks/results/probe_gemv-h200.txt), at M = 1 the GEMV's config ran 1.05-1.21x (FP8) and
# 1.05-1.33x (BF16) the tensor-core kernel at K >= 7168, FP8 1.08x at K = 2048 and 0.91-1.00x at
# K <= 1536, BF16 0.94-1.00x at K <= 2048; at M = 2 its best variant 0.90x (FP8) / 0.94x (BF16)
# geomean, at 4 and 8 rows 0.41-0.79x.
FP8_GEMV_MAX_M = 1
BF16_GEMV_MAX_M = 1
FP8_GEMV_MIN_K = 2048
BF16_GEMV_MIN_K = 4096


# B under L2 evict-first (gemm_pipeline.cuh load_b_tile, compiled in as DG_B_EVICT_FIRST) where
# its tiles are read by the CTAs of at most two block rows and B is at most B_EVICT_FIRST_MAX_BYTES:
# the weights of decode-sized M, streamed once. Their lines are then what later loads evict,
# rather than lines other kernels wrote: the timing method's flush leaves the L2 full of dirty
# lines, which a call must otherwise write back first (5-10 us on an H100, probe_flush.py), and in
# a model those lines are the activations the next kernels read. Measured (H100, NOTES.md session
# 37): FP8 128x128 at M = 128 / 64 1-13 % faster, M = 4096 (B read by 32 block rows) 4.5 % slower;
# the masked decode GEMMs 1-14 % faster at 6 groups (B 50-264 MB), 1.5-2.5 % slower at 32 groups
# with B of 400 MB or more. Those gains are the flush's write-back spared: with a clean L2 (a
# read-only flush) 6 x 20 4096x2048 ran 24.3 against 24.4 us. Off until measured with the API's
# own tiles (64-row, split-K) on the H200 (benchmarks/probe_evict_first.py); BF16 has its own switch.
B_EVICT_FIRST = False
B_EVICT_FIRST_BF16 = False
B_EVICT_FIRST_MAX_BYTES = 300 * 2**20


def b_evict_first(block_rows: int, b_bytes: int, bf16: bool = False) -> bool:
    """Whether a GEMM whose B tiles are read by `block_rows` block rows of CTAs (per group) and
    whose B (all groups) holds `b_bytes` loads B under L2 evict-first."""
    return (B_EVICT_FIRST and (B_EVICT_FIRST_BF16 or not bf16) and block_rows <= 2
            and b_bytes <= B_EVICT_FIRST_MAX_BYTES)


def takes_gemv(m: int, k: int, fp8: bool) -> bool:
    """Whether an SM90 dense FP8 (or BF16) GEMM of M rows and depth K goes to the GEMV."""
    if fp8:
        return m <= FP8_GEMV_MAX_M and k >= FP8_GEMV_MIN_K
    return m <= BF16_GEMV_MAX_M and k >= BF16_GEMV_MIN_K


def fp8_scale_stage_bytes(kind: str, block_m: int, block_n: int) -> int:
    """Mirrors Fp8GemmTraits::kScaleStageBytes: each stage's sfa row (block_m floats) and, for
    1D1D, its sfb row (block_n floats, rounded up to 128 bytes)."""
    return block_m * 4 + (-(-block_n * 4 // 128) * 128 if kind == "1d1d" else 0)


def fp8_gemm_shared_memory(kind: str, block_m: int, block_n: int, num_stages: int,
                           out_bytes: int, split_k: bool = False, accumulate: bool = False) -> int:
    """Mirrors Fp8GemmTraits::kSmemBytes: the BF16 plan (a 128-wide FP8 K block has the bytes of a
    64-wide BF16 one) plus the stages' scales."""
    return bf16_gemm_shared_memory(block_m, block_n, num_stages, out_bytes, split_k,
                                   extra_stage_bytes=fp8_scale_stage_bytes(kind, block_m, block_n),
                                   accumulate=accumulate)


def fp8_split_columns_shared_memory(block_n: int, num_stages: int) -> int:
    """Mirrors Fp8GemmTraits::kSmemBytes for a column-split tile (kSplitColumns: 64 rows, 1D2D,
    BF16 D): the ring, barriers and flags of two consumer warpgroups, and one 64-row staging
    slice per warpgroup for its block_n / 2 columns, as wide as the room the ring leaves."""
    stage = (64 + block_n) * BLOCK_K_BF16 * 2 + fp8_scale_stage_bytes("1d2d", 64, block_n)
    non_staging = num_stages * stage + (2 * num_stages + 2) * 8 + 2 * 4 + 1024
    half = block_n // 2
    slab_bytes = 64 * epilogue_swizzle_bytes(half, 2)
    room = max(0, SMEM_LIMIT - non_staging) // (2 * slab_bytes)
    return non_staging + 2 * 64 * 2 * epilogue_staging_cols(half, 2, room)


def make_fp8_split_columns_config(block_n: int, num_sms: int,
                                  num_stages: int | None = None) -> Bf16GemmConfig | None:
    """A column-split tile of the M-grouped FP8 GEMM (64 rows; each consumer warpgroup computes
    block_n / 2 columns) on a grid of `num_sms` (the caller caps it at the tiles): with
    `num_stages`, or the most that fit beside at least one slab of staging; None where fewer than
    three fit or block_n is not a multiple of 32 up to 256."""
    if block_n <= 0 or block_n % 32 or block_n > 256:
        return None
    if num_stages is None:
        num_stages = max((s for s in range(1, MAX_STAGES + 1)
                          if fp8_split_columns_shared_memory(block_n, s) <= SMEM_LIMIT), default=0)
    if num_stages < 3 or fp8_split_columns_shared_memory(block_n, num_stages) > SMEM_LIMIT:
        return None
    return Bf16GemmConfig(block_m=64, block_n=block_n, num_stages=num_stages,
                          group_m=DEFAULT_L2_GROUP, num_sms=num_sms, split_columns=True)


def make_fp8_config(kind: str, m: int, n: int, block_m: int, block_n: int, num_splits: int, k: int,
                    out_bytes: int, num_sms: int, cluster_n: int = 1,
                    cluster_m: int = 1) -> Bf16GemmConfig | None:
    """make_config with the FP8 kernel's stage size (tiles plus scales); None also for a 256-row
    tile the kernel refuses at compile time (it is 1D2D with BF16 D only, without split-K or a
    cluster, block N <= FP8_256_MAX_BLOCK_N)."""
    if block_m == 256 and (not fp8_block_n_fits(kind, block_m, block_n) or out_bytes != 2
                           or num_splits > 1 or cluster_n * cluster_m > 1):
        return None
    return make_config(m, n, block_m, block_n, num_splits, k, out_bytes, num_sms, cluster_n,
                       cluster_m, fp8_scale_stage_bytes(kind, block_m, block_n))


def fp8_overlaps_promotion(kind: str, block_n: int) -> bool:
    """Mirrors Fp8GemmTraits::kOverlapPromotion (fp8_gemm.cuh): whether the tile keeps two
    partial sets, so that a K block's wgmmas run under the previous block's promotion. acc plus
    two partial sets plus the block's scales must fit the consumer's registers, and a 1D2D tile
    must sit inside one 128-column scale block. (For block M <= 128: 256-row tiles never overlap.)"""
    scale_registers = block_n // 4 + 2 if kind == "1d1d" else 4
    fits = 3 * block_n // 2 + scale_registers <= 200
    return fits and (kind == "1d1d" or 128 % block_n == 0)


# The FP8 model's speed-up for tiles whose promotion overlaps the next K block's wgmmas
# (_fp8_tensor_core_efficiency), by block M.
FP8_OVERLAP_SPEEDUP = {128: 1.20, 64: 1.13}


def _fp8_tensor_core_efficiency(block_m: int, block_n: int, kind: str = "1d2d") -> float:
    """The BF16 model's efficiency, less the promotion's share: every 128-wide K block costs each
    consumer thread a fixed ~80 issued instructions plus block_n / 2 FFMAs (1D2D), so wider tiles
    amortize more. Fitted to the 2026-12-01 H200 sweep at M=4096: per K block, 59 % of peak at
    block N 128, 62 % at 160, 65 % at 192 (bench_gemm.py --family fp8_gemm --sweep). A tile
    whose promotion overlaps the next block's wgmmas runs faster: 1.20x for 128-row tiles, 1.13x
    for 64-row ones. (1.13x for all until 2026-12-04, from the 2026-12-01 sweep of the overlapped
    kernel, where 128x128 beat 128x192 by 3-4 % once the wave counts were factored out. On
    2026-12-04, with the stmatrix epilogue, 128x128 ran 7-10 % faster than 128x192 on the dense
    4096x{4096x7168, 7168x16384, 7168x2048} shapes (probe_fp8.py) and 12-27 % faster on the
    M-grouped contiguous N=7168 K=3072 and N=4096 K=2048 shapes, which 1.13x gave 128x192
    (probe_grouped_tiles.py). 1.20x for 64-row tiles too moved 2112x4096x7168 from 128x192 (114.9
    us) to 64x128 (125.0 us) in the same day's bench, so they keep 1.13x; NOTES.md session 22.)"""
    efficiency = _tensor_core_efficiency(block_m, block_n) * (0.72 + 0.07 * (block_n - 128) / 64)
    if not fp8_overlaps_promotion(kind, block_n):
        return efficiency
    return efficiency * FP8_OVERLAP_SPEEDUP[min(block_m, 128)]


def fp8_block_n_fits(kind: str, block_m: int, block_n: int) -> bool:
    if block_m == 256:   # two accumulator sets per thread; 1D2D (BF16 D) only
        return kind == "1d2d" and block_n <= FP8_256_MAX_BLOCK_N
    limit = FP8_MAX_BLOCK_N[kind]
    return block_n <= (limit if block_m == 128 or kind == "1d2d" else 128)


def choose_fp8_gemm_config(m: int, n: int, k: int, out_bytes: int, num_sms: int,
                           kind: str = "1d2d", block_n_divides: int | None = None,
                           block_n_multiple: int = 1) -> Bf16GemmConfig:
    """The FP8 kernel's tile: the BF16 kernel's pipeline and shared-memory plan plus each stage's
    scales (fp8_gemm_shared_memory). A 128-wide FP8 K block is 128 bytes per row, like a 64-wide
    BF16 one, and runs at twice the rate, so the BF16 cost model applies with K halved; split-K
    where the tiles leave SMs idle; no clusters (measured no faster, NOTES.md). `block_n_divides`:
    BLOCK_N must divide it (fp8_gemm_nt_skip_head_mid keeps tiles out of the skipped columns, and
    never splits K: its split-K store has no column remap). Block M is 64 or 128 here; the
    kernel's 256-row tiles (1D2D, BF16 D) come only from tuned entries, where they were measured
    faster (K <= 1536 shapes; the model mispredicted them, NOTES.md session 17). `block_n_multiple`:
    set_block_size_multiple_of's N multiple (block N a multiple of lcm(16, it)). A tuned entry
    (autotune_configs/sm90/fp8_gemm.json) wins when neither constraint is set."""
    def deepened(config):   # with_pipeline_depth: measured for 1D2D only
        if block_n_divides is None:   # (skip-head-mid: the split store has no column remap)
            config = with_stream_k(config, m, n, -(-k // 128), num_sms)
        if kind != "1d2d":
            return config
        return with_pipeline_depth(config, n, k, 1, out_bytes,
                                   fp8_scale_stage_bytes(kind, config.block_m, config.block_n))

    if block_n_divides is None and block_n_multiple == 1:
        tuned = tuned_fp8_config(kind, m, n, k, out_bytes, num_sms)
        if tuned is not None:
            return deepened(tuned)
    best = None
    for block_m, block_n in bf16_gemm_candidates(m, n, block_n_multiple=block_n_multiple):
        if not fp8_block_n_fits(kind, block_m, block_n) or (block_n_divides and block_n_divides % block_n):
            continue
        tiles = math.ceil(m / block_m) * math.ceil(n / block_n)
        split_options = range(1, MAX_SPLITS + 1) if tiles < num_sms and not block_n_divides else (1,)
        for splits in split_options:
            config = make_fp8_config(kind, m, n, block_m, block_n, splits, k, out_bytes, num_sms)
            if config is None or (splits > 1 and config.num_splits != splits):
                continue
            cycles = estimate_cycles(m, n, -(-k // 2), block_m, block_n, config.num_splits, num_sms,
                                     functools.partial(_fp8_tensor_core_efficiency, kind=kind))
            score = (cycles, config.num_splits, -(block_m * block_n))
            if best is None or score < best[0]:
                best = (score, config)
    if best is None:
        raise RuntimeError(f"no SM90 FP8 GEMM config for m={m} n={n} k={k}"
                           + (f" with block N dividing {block_n_divides}" if block_n_divides else "")
                           + _block_n_multiple_hint(block_n_multiple))
    return deepened(with_l2_group(best[1], m, n, k, 1))


def tuned_fp8_config(kind, m, n, k, out_bytes, num_sms) -> Bf16GemmConfig | None:
    """A measured winner for exactly this problem (bench_gemm.py --family fp8_gemm --sweep)."""
    entry = _load_tuned_table("fp8_gemm").get((kind, m, n, k, out_bytes, num_sms))
    if entry is None:
        return None
    config = make_fp8_config(kind, m, n, entry["block_m"], entry["block_n"], entry["num_splits"], k,
                             out_bytes, num_sms, entry.get("cluster_n", 1), entry.get("cluster_m", 1))
    return _tuned_l2_group(config, entry)


# M-grouped BF16 GEMMs (bf16_gemm.cuh with the schedulers of scheduler_grouped.cuh): the dense
# kernel's tiles, stages and cost model; only block M is fixed by the layout (API.md 7).
GROUPED_CONTIGUOUS, GROUPED_MASKED = "contiguous", "masked"


def grouped_contiguous_block_m(mk_alignment: int) -> int | None:
    """The contiguous layouts' block M: the largest of the kernel's {128, 64} dividing the mk
    alignment (DeepGEMM uses the alignment itself; a divisor keeps tiles inside one group too), or
    None when neither divides it (the portable path serves such alignments)."""
    for block_m in (128, 64):
        if mk_alignment % block_m == 0:
            return block_m
    return None


def estimate_grouped_cycles(num_groups: int, rows_per_group: int, n: int, k: int, block_m: int,
                            block_n: int, num_sms: int, fp8: bool = False) -> float:
    """estimate_cycles for `num_groups` GEMMs of rows_per_group x n x k sharing one persistent grid:
    every group rounds its rows up to whole tiles, and reads its own B from HBM. `fp8`: the FP8
    kernel (a 128-wide FP8 K block costs what a 64-wide BF16 one does, as in
    choose_fp8_gemm_config, with the promotion's share of _fp8_tensor_core_efficiency)."""
    tiles = num_groups * math.ceil(rows_per_group / block_m) * math.ceil(n / block_n)
    rounds = math.ceil(tiles / num_sms)
    k_bf16 = -(-k // 2) if fp8 else k
    k_padded = math.ceil(k_bf16 / BLOCK_K_BF16) * BLOCK_K_BF16
    efficiency = (_fp8_tensor_core_efficiency if fp8 else _tensor_core_efficiency)(block_m, block_n)
    compute = 2 * block_m * block_n * k_padded / (PEAK_FLOPS_PER_CLOCK * efficiency)
    l2 = (block_m + block_n) * k_padded * 2 / L2_BYTES_PER_CLOCK
    unit = max(compute, l2) + UNIT_OVERHEAD_CLOCKS
    operand_bytes = 1 if fp8 else 2
    hbm = num_groups * ((rows_per_group * k + n * k) * operand_bytes + rows_per_group * n * 2) / HBM_BYTES_PER_CLOCK
    return max(rounds * unit, hbm)


# Masked FP8 decode (expected m <= 64): block N among these, by wave efficiency. The time is B
# streamed from HBM, but a last round of few tiles leaves most SMs without a stream, and block N
# 192 (the cost model's pick: all tie on HBM time) measured 1-9 % slower than the best of these
# on every decode shape of API.md 8 (probe_masked.py, 2026-12-02): 128 won at 32 groups, 64-128
# at 6 groups, where 128 leaves a 0.73-full last round on two of the four shapes.
_MASKED_DECODE_BLOCK_NS = (64, 96, 128)


def _masked_fp8_decode_config(num_groups: int, rows_per_group: int, rows: int, n: int, k: int,
                              num_sms: int) -> Bf16GemmConfig | None:
    """Block M 64; the block N whose tiles fill their rounds of num_sms best (in steps of 2 %),
    the widest of those; the grid as choose_m_grouped_bf16_config caps it. For N of at least the
    widest candidate (narrower N takes the cost model, whose candidates stop at N)."""
    best = None
    for block_n in _MASKED_DECODE_BLOCK_NS:
        config = make_fp8_config("1d2d", 64, n, 64, block_n, 1, k, 2, num_sms)
        if config is None or not fp8_block_n_fits("1d2d", 64, block_n):
            continue
        tiles = num_groups * math.ceil(rows_per_group / 64) * math.ceil(n / block_n)
        filled = tiles / (math.ceil(tiles / num_sms) * num_sms)
        score = (math.floor(filled * 50), block_n)
        if best is None or score > best[0]:
            best = (score, config)
    return None if best is None else _grid_within_tiles(best[1], num_groups, rows, n, num_sms)


# Masked FP8 with a few 64-row units per group: the column-split 64x256 tile (fp8_gemm.cuh
# kSplitColumns) rounds each group's rows up to 64 rather than 128, at 25 % more L2 -> SM bytes per
# FLOP than 128x128. The cost model, with every group at expected_m rows, cannot see the rounding
# it saves (230 rows are 4 units of 64 or 2 of 128 alike), so this is a measured rule
# (probe_grouped_tiles.py, H100, 2026-12-07; benchmarks/NOTES.md, session 32): 1.03-1.04x the
# model's 128x128 at 32 groups of 134-250 rows (expected m 192, N 4096-7168), but 0.92-1.00x at 6
# groups of ~1024 rows and 0.91-1.01x at decode sizes; 64x192c was 0.59-0.88x, 64x128c 0.86-0.99x.
SPLIT_COLUMNS_BLOCK_N = 256
SPLIT_COLUMNS_ROWS = (64, 256)   # expected m in (64, 256]
SPLIT_COLUMNS_MIN_N = 4096       # the narrowest N measured


def _takes_split_columns(rows_per_group: int, n: int) -> bool:
    low, high = SPLIT_COLUMNS_ROWS
    return low < rows_per_group <= high and n >= SPLIT_COLUMNS_MIN_N


def _grid_within_tiles(config: Bf16GemmConfig, stacks: int, rows: int, n: int,
                       num_sms: int) -> Bf16GemmConfig:
    """The config with a persistent grid no larger than the tiles `stacks` x `rows` x n make."""
    most_tiles = stacks * math.ceil(rows / config.block_m) * math.ceil(n / config.block_n)
    return replace(config, num_sms=max(1, min(num_sms, most_tiles)))


def choose_m_grouped_fp8_config(kind: str, num_groups: int, rows_per_group: int, rows: int,
                                n: int, k: int, num_sms: int,
                                mk_alignment: int | None = None) -> Bf16GemmConfig | None:
    """choose_m_grouped_bf16_config for the M-grouped FP8 GEMMs (fp8_gemm.cuh with the grouped
    schedulers, 1D2D): block N within the FP8 kernel's register caps, stages with its scales."""
    return choose_m_grouped_bf16_config(kind, num_groups, rows_per_group, rows, n, k, num_sms,
                                        mk_alignment, fp8=True)


def choose_m_grouped_bf16_config(kind: str, num_groups: int, rows_per_group: int, rows: int,
                                 n: int, k: int, num_sms: int, mk_alignment: int | None = None,
                                 b_k_major: bool = True, block_n_multiple: int = 1,
                                 fp8: bool = False) -> Bf16GemmConfig | None:
    """The tile of an M-grouped BF16 GEMM, or None when the kernel cannot serve it (a contiguous mk
    alignment with no block M dividing it).

    kind GROUPED_CONTIGUOUS: block M from the mk alignment (grouped_contiguous_block_m); block N by
    the cost model for `num_groups` groups of `rows_per_group` rows (M / G for the index layout,
    expected_m_for_psum_layout for psum). GROUPED_MASKED: block M in {64, 128} and block N by the
    cost model with `rows_per_group` = expected_m (FP8 decode, expected_m <= 64 and N >= 128:
    _masked_fp8_decode_config instead; FP8 with expected_m in SPLIT_COLUMNS_ROWS and N of at least
    SPLIT_COLUMNS_MIN_N: the column-split 64x256 tile). `rows`: A's rows, M (contiguous) or max_m per
    group (masked); the most tiles they make cap the persistent grid. Ties on modelled cycles go
    to the tiling that keeps more SMs busy (memory-bound decode shapes tie on HBM time), then to
    the larger tile."""
    if kind == GROUPED_CONTIGUOUS:
        block_m = grouped_contiguous_block_m(mk_alignment)
        if block_m is None:
            return None
        block_ms = (block_m,)
    elif kind == GROUPED_MASKED:
        block_ms = (64,) if rows_per_group <= 64 else (64, 128)
    else:
        raise ValueError(f"unknown grouped GEMM kind {kind!r}")
    rows_per_group = max(rows_per_group, 1)
    if fp8 and kind == GROUPED_MASKED and rows_per_group <= 64 and n >= max(_MASKED_DECODE_BLOCK_NS):
        return _masked_fp8_decode_config(num_groups, rows_per_group, rows, n, k, num_sms)
    if fp8 and kind == GROUPED_MASKED and _takes_split_columns(rows_per_group, n):
        split = make_fp8_split_columns_config(SPLIT_COLUMNS_BLOCK_N, num_sms)
        if split is not None:
            return _grid_within_tiles(split, num_groups, rows, n, num_sms)
    best = None
    for block_m in block_ms:
        for block_n in sorted({bn for _, bn in bf16_gemm_candidates(128, n, b_k_major, block_n_multiple)}):
            if fp8 and not fp8_block_n_fits("1d2d", block_m, block_n):
                continue
            if fp8 and kind == GROUPED_MASKED and block_m == 128 and block_n > 160:
                # With the masked scheduler's state, 128x176 and 128x192 spilled (88-96 B) when K
                # was compiled in as 2048 (tests/test_compile_sm90_grouped.py); 160 never did.
                continue
            config = (make_fp8_config("1d2d", block_m, n, block_m, block_n, 1, k, 2, num_sms) if fp8
                      else make_config(block_m, n, block_m, block_n, 1, k, 2, num_sms))
            if config is None:
                continue
            cycles = estimate_grouped_cycles(num_groups, rows_per_group, n, k, block_m, block_n,
                                             num_sms, fp8)
            tiles = num_groups * math.ceil(rows_per_group / block_m) * math.ceil(n / block_n)
            score = (round(cycles, -2), -min(tiles, num_sms), -(block_m * block_n))
            if best is None or score < best[0]:
                best = (score, config)
    if best is None:
        return None
    return _grid_within_tiles(best[1], num_groups if kind == GROUPED_MASKED else 1, rows, n, num_sms)
