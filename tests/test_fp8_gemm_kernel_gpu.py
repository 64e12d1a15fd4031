"""The SM90 FP8 GEMM kernel (dg_triton.kernels.sm90_fp8_gemm.run) on forced tile configs, on an
SM90 GPU: every kernel feature a config may use (scale blocks straddled by a tile, the widest tiles,
both block M, 2-CTA multicast clusters along M and N, 1D2D and 1D1D with accumulation, M/N/K tails,
skip-head-mid's column remap), independent of what the heuristics pick. The public API's tests
(validation, aliases, the API.md 8 shapes) call the same kernel through dg_triton.fp8_gemm_*.

Operands are quantized with our casts (per-token 1x128 for A, per-block 128x128 or per-token for
B); outputs are poisoned with NaN before the call. The inputs' magnitudes vary by up to 2^3 either
way from one 128-wide scale group to the next (randn alone gives nearly equal scales everywhere,
and a kernel reading the wrong scale would pass at calc_diff ~ 2e-3). Two references: the
dequantized operands multiplied in FP32 (what the kernel computes up to FP32 accumulation order)
and the unquantized BF16 inputs (API.md 8's reference, FP8 error included); both must give
calc_diff < 1e-3.
"""
import pytest
import torch

pytestmark = pytest.mark.gpu

THRESHOLD = 1e-3


def _require_sm90():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an SM90 GPU")


def _dequantize(q, sf, block_rows, block_cols=128):
    """q [R, C] fp8 with one scale per block_rows x block_cols block (sf [ceil(R/br), ceil(C/bc)])."""
    rows, cols = q.shape
    scale = sf.float().repeat_interleave(block_rows, 0)[:rows].repeat_interleave(block_cols, 1)[:, :cols]
    return q.float() * scale


def scale_groups_apart(rows, cols, block_rows):
    """randn [rows, cols] times 2^e, e in [-3, 3] drawn per block_rows x 128 group: every scale
    group gets its own magnitude, so a scale applied to the wrong group shows."""
    exponents = torch.randint(-3, 4, (-(-rows // block_rows), -(-cols // 128)), device="cuda").float()
    factor = torch.exp2(exponents).repeat_interleave(block_rows, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
    return (torch.randn(rows, cols, device="cuda") * factor).to(torch.bfloat16)


def _operands(m, n, k, kind):
    import dg_triton

    a = scale_groups_apart(m, k, 1)
    b = scale_groups_apart(n, k, 128 if kind == "1d2d" else 1)
    a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
    if kind == "1d2d":
        b_q, sfb = dg_triton.per_block_cast_to_fp8(b, False)
        b_dequant = _dequantize(b_q, sfb, 128)
    else:
        b_q, sfb = dg_triton.per_token_cast_to_fp8(b, False, tma_aligned_sf=True)
        b_dequant = _dequantize(b_q, sfb, 1)
    a_dequant = _dequantize(a_q, sfa, 1)
    return a, b, a_q, sfa, b_q, sfb, a_dequant @ b_dequant.T


def _run(a_q, sfa, b_q, sfb, d, m, n, k, kind, accumulate, config, head_splits=None, probe_defines=()):
    from dg_triton.kernels import sm90_fp8_gemm

    layout = (d.dtype, a_q.stride(), b_q.stride(), d.stride(), sfa.stride(), sfb.stride())
    problem = sm90_fp8_gemm.Fp8GemmProblem(m, n, k, kind, d.device.index, head_splits, layout)
    sm90_fp8_gemm.run("test", a_q, sfa, b_q, sfb, d, problem, accumulate, "", config, probe_defines)
    torch.cuda.synchronize()


# (kind, block_m, block_n, cluster_m, cluster_n)
FORCED = [
    ("1d2d", 128, 128, 1, 1), ("1d2d", 128, 144, 1, 1), ("1d2d", 128, 192, 1, 1), ("1d2d", 64, 112, 1, 1),
    ("1d2d", 64, 16, 1, 1), ("1d2d", 64, 192, 1, 1), ("1d2d", 128, 128, 2, 1), ("1d2d", 128, 128, 1, 2),
    ("1d1d", 128, 128, 1, 1), ("1d1d", 128, 144, 1, 1), ("1d1d", 64, 128, 1, 1), ("1d1d", 128, 80, 2, 1),
    ("1d1d", 64, 64, 1, 2),
    # 256-row tiles (two row waves per consumer warpgroup); 96 straddles scale blocks
    ("1d2d", 256, 128, 1, 1), ("1d2d", 256, 96, 1, 1), ("1d2d", 256, 64, 1, 1),
]


@pytest.mark.parametrize("kind,block_m,block_n,cluster_m,cluster_n", FORCED)
@pytest.mark.parametrize("accumulate", (False, True))
def test_fp8_kernel_forced_configs_match_references(kind, block_m, block_n, cluster_m, cluster_n,
                                                    accumulate):
    _require_sm90()
    from dg_triton.heuristics.sm90 import make_fp8_config

    if accumulate and kind == "1d2d":
        pytest.skip("SM90 FP8 accumulates only with the 1D1D recipe (API.md 1.3)")
    # M, N and K tails: the last M, N and K blocks are partial, N is not a multiple of the
    # 128-column scale blocks, and the grid has whole clusters along each axis.
    m, n, k = 200, 1000, 1040
    if (-(-n // block_n)) % cluster_n:
        n = block_n * cluster_n * 4
    out_dtype = torch.float32 if kind == "1d1d" else torch.bfloat16
    a, b, a_q, sfa, b_q, sfb, dequant_ref = _operands(m, n, k, kind)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
    c = None
    if accumulate:
        c = torch.randn(m, n, device="cuda").mul_(32)
        d.copy_(c)
    config = make_fp8_config(kind, m, n, block_m, block_n, 1, k, d.element_size(), 132, cluster_n, cluster_m)
    assert config is not None
    _run(a_q, sfa, b_q, sfb, d, m, n, k, kind, accumulate, config)
    assert torch.isfinite(d).all(), "unwritten (NaN) or non-finite output elements"
    expected = dequant_ref + (c if c is not None else 0)
    unquantized = a.float() @ b.float().T + (c if c is not None else 0)
    from dg_triton.testing import calc_diff
    assert calc_diff(d.float(), expected) < THRESHOLD
    assert calc_diff(d.float(), unquantized) < THRESHOLD


@pytest.mark.parametrize("block_n", (128, 96))
def test_fp8_kernel_256_row_tiles_equal_128_row_tiles_bitwise_on_a_small_grid(block_n):
    """A 256-row tile computes each element as two 128-row tiles do (the same wgmma partial sums,
    promoted in the same K order), so the outputs must match bit for bit. Eight CTAs walk 24-32 tiles
    each, so every row wave's staging buffer is reused across tiles while the other wave's store
    may still be reading its own (the epilogue's kOtherBuffers wait); M and N have tails."""
    _require_sm90()
    from dg_triton.heuristics.sm90 import make_fp8_config
    from dg_triton.testing import calc_diff

    m, n, k = 3000, 2000, 1040
    a, b, a_q, sfa, b_q, sfb, dequant_ref = _operands(m, n, k, "1d2d")
    outputs = []
    for block_m in (256, 128):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        config = make_fp8_config("1d2d", m, n, block_m, block_n, 1, k, 2, 8)
        assert config is not None and config.num_sms == 8
        _run(a_q, sfa, b_q, sfb, d, m, n, k, "1d2d", False, config)
        assert torch.isfinite(d).all(), f"block M {block_m}: unwritten (NaN) or non-finite elements"
        assert calc_diff(d.float(), dequant_ref) < THRESHOLD
        outputs.append(d)
    assert torch.equal(outputs[0], outputs[1])


@pytest.mark.parametrize("block_m,cluster_m,cluster_n", ((128, 1, 1), (256, 1, 1), (128, 2, 1), (64, 1, 2)))
def test_fp8_kernel_every_l2_group_equals_group_8_bitwise(block_m, cluster_m, cluster_n):
    """The L2 group only reorders which tiles a CTA takes (scheduler.cuh swizzle): each element
    is computed the same way whatever the order, so every group's output must equal group 8's bit
    for bit. Groups 1 and 3 and 32 (more rows than the 12-row grids, a last partial group), M and N
    tails with whole clusters along each axis, eight CTAs walking many tiles each."""
    _require_sm90()
    import dataclasses
    from dg_triton.heuristics.sm90 import make_fp8_config
    from dg_triton.testing import calc_diff

    block_n = 112 if cluster_n == 1 else 64
    # 12 block rows either way; 16-byte multiples for D rows (bf16) and A / B rows (FP8)
    m, n, k = 3000 if block_m == 256 else 1500, 1240 if cluster_n == 2 else 1304, 528
    assert -(-m // block_m) % cluster_m == 0 and -(-n // block_n) % cluster_n == 0
    a, b, a_q, sfa, b_q, sfb, dequant_ref = _operands(m, n, k, "1d2d")
    config = make_fp8_config("1d2d", m, n, block_m, block_n, 1, k, 2, 8, cluster_n, cluster_m)
    assert config is not None
    outputs = {}
    for group_m in (8, 1, 2, 3, 16, 32):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        _run(a_q, sfa, b_q, sfb, d, m, n, k, "1d2d", False, dataclasses.replace(config, group_m=group_m))
        assert torch.isfinite(d).all(), f"group {group_m}: unwritten (NaN) or non-finite elements"
        outputs[group_m] = d
    assert calc_diff(outputs[8].float(), dequant_ref) < THRESHOLD
    for group_m, d in outputs.items():
        assert torch.equal(d, outputs[8]), f"group {group_m} differs from group 8"


@pytest.mark.parametrize("block_n", (112, 144, 128))   # overlapped promotion; not; D in 2 chunks
# c loaded with 4 K blocks left of 16 (the blocks then run as chains of 8 and 4, the load, a chain
# of 4), of 9, of 17 and of 6 (the fewest that load early: a chain of 2, the load, a chain of 4);
# at the store with 5 K blocks, 4 and one
@pytest.mark.parametrize("k", (2048, 1040, 2176, 768, 640, 512, 128))
def test_fp8_kernel_early_c_load_equals_the_late_load_and_serial_add_probes(block_n, k):
    """The load of c under the K loop (the default, fp8_gemm.cuh kEarlyCLoad) against the load at
    the store (DG_PROBE_LATE_C_LOAD, benchmarks/probe_fp8.py), and the epilogue's batched c add
    against one pair at a time (DG_PROBE_SERIAL_C_ADD, epilogue.cuh), with more tiles than SMs so
    that CTAs reuse their staging for a second tile: the same arithmetic in the same order, so
    the outputs must be bitwise equal (a c loaded late, stale, not at all or added to the wrong
    pair cannot hide behind a calc_diff threshold), and match the references."""
    _require_sm90()
    from dg_triton.heuristics.sm90 import make_fp8_config
    from dg_triton.testing import calc_diff

    m, n = 2000, 2500
    a, b, a_q, sfa, b_q, sfb, dequant_ref = _operands(m, n, k, "1d1d")
    c = torch.randn(m, n, device="cuda").mul_(k ** 0.5)   # as large as the product
    config = make_fp8_config("1d1d", m, n, 128, block_n, 1, k, 4, 132)
    assert config is not None and -(-m // 128) * -(-n // block_n) > config.num_sms
    outputs = []
    for defines in ((), ("DG_PROBE_LATE_C_LOAD",), ("DG_PROBE_SERIAL_C_ADD",)):
        d = c.clone()
        _run(a_q, sfa, b_q, sfb, d, m, n, k, "1d1d", True, config, probe_defines=defines)
        outputs.append(d)
    assert torch.equal(outputs[0], outputs[1]), "the early load of c changed the result"
    assert torch.equal(outputs[0], outputs[2]), "the batched c add changed the result"
    assert calc_diff(outputs[0].float(), dequant_ref + c) < THRESHOLD
    assert calc_diff(outputs[0].float(), a.float() @ b.float().T + c) < THRESHOLD


@pytest.mark.parametrize("kind,block_n,cluster_m", [("1d2d", 192, 1), ("1d2d", 144, 1), ("1d2d", 144, 2),
                                                    ("1d2d", 128, 1), ("1d1d", 112, 1)])
def test_fp8_kernel_deep_ring_with_narrow_staging_equals_the_default_ring(kind, block_n, cluster_m):
    """A ring deeper than the epilogue's default staging leaves room for stores each tile in
    narrower chunks (SwizzledTmaStoreEpilogue's kMaxChunkSlabs; 1D1D also loads c per chunk):
    bitwise equal to the same tile at its default depth, more tiles than SMs, M and N tails,
    every element written, and equal to the references."""
    _require_sm90()
    import dataclasses

    from dg_triton.heuristics import sm90 as heuristics
    from dg_triton.testing import calc_diff

    m, n, k = 2000, 2360, 1040   # N: whole BF16 rows of 16 bytes for TMA, a tail for every block N
    accumulate = kind == "1d1d"
    out_dtype = torch.float32 if accumulate else torch.bfloat16
    a, b, a_q, sfa, b_q, sfb, dequant_ref = _operands(m, n, k, kind)
    c = torch.randn(m, n, device="cuda").mul_(k ** 0.5) if accumulate else None
    base = heuristics.make_fp8_config(kind, m, n, 128, block_n, 1, k, out_dtype.itemsize, 132,
                                      cluster_m=cluster_m)
    extra = heuristics.fp8_scale_stage_bytes(kind, 128, block_n)
    deep = heuristics.max_stages(128, block_n, out_dtype.itemsize, False, extra, cap=12,
                                 narrow_staging=True)
    assert base is not None and deep > base.num_stages
    assert heuristics.epilogue_chunk_cols(128, block_n, deep, out_dtype.itemsize, extra) < \
        heuristics.epilogue_chunk_cols(128, block_n, base.num_stages, out_dtype.itemsize, extra)
    outputs = []
    for stages in (base.num_stages, deep):
        d = c.clone() if accumulate else torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
        _run(a_q, sfa, b_q, sfb, d, m, n, k, kind, accumulate, dataclasses.replace(base, num_stages=stages))
        assert torch.isfinite(d).all(), f"{stages} stages: unwritten (NaN) or non-finite elements"
        outputs.append(d)
    assert torch.equal(outputs[1], outputs[0]), "the narrow staging changed the result"
    expected = dequant_ref + c if accumulate else dequant_ref
    assert calc_diff(outputs[1].float(), expected) < THRESHOLD


@pytest.mark.parametrize("kind,block_n,num_splits", [("1d1d", 128, 1), ("1d1d", 112, 1), ("1d1d", 64, 3),
                                                     ("1d2d", 128, 1), ("1d2d", 192, 1)])
def test_fp8_kernel_ffma_yield_builds_equal_the_ptxas_build(kind, block_n, num_splits):
    """The FFMA yield pass (dg_triton/jit/sass_yield.py; 1D1D binaries get "front" by default)
    rewrites scheduling hints only: every policy's output must equal the unpatched build's bit
    for bit, on a problem with more tiles than SMs, accumulation (1D1D) and split-K."""
    _require_sm90()
    from dg_triton.heuristics.sm90 import make_fp8_config
    from dg_triton.jit import sass_yield
    from dg_triton.testing import calc_diff

    m, n, k = 2000, 2504, 1040   # N: BF16 rows of whole 16 bytes (TMA), not a multiple of the tiles
    accumulate = kind == "1d1d"
    a, b, a_q, sfa, b_q, sfb, dequant_ref = _operands(m, n, k, kind)
    out_dtype = torch.float32 if accumulate else torch.bfloat16
    c = torch.randn(m, n, device="cuda").mul_(k ** 0.5) if accumulate else None
    block_m = 128 if num_splits == 1 else 64
    config = make_fp8_config(kind, m, n, block_m, block_n, num_splits, k, out_dtype.itemsize, 132)
    assert config is not None
    outputs = []
    for policy in ("ptxas",) + sass_yield.POLICIES:
        d = c.clone() if accumulate else torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
        _run(a_q, sfa, b_q, sfb, d, m, n, k, kind, accumulate, config,
             probe_defines=(f"DG_PROBE_FFMA_YIELD_{policy.upper()}",))
        outputs.append(d)
    for policy, d in zip(sass_yield.POLICIES, outputs[1:]):
        assert torch.equal(d, outputs[0]), f"policy {policy} changed the result"
    expected = dequant_ref + (c if accumulate else 0)
    assert torch.isfinite(outputs[0]).all() and calc_diff(outputs[0].float(), expected) < THRESHOLD


# (kind, block_m, block_n, num_splits): split-K reduces K-slices through the FP32 workspace.
SPLIT_K = [("1d2d", 64, 64, 4), ("1d2d", 64, 16, 9), ("1d2d", 128, 144, 3), ("1d1d", 64, 128, 2),
           ("1d1d", 128, 80, 5)]


@pytest.mark.parametrize("kind,block_m,block_n,num_splits", SPLIT_K)
@pytest.mark.parametrize("accumulate", (False, True))
def test_fp8_kernel_split_k_matches_references_and_replays(kind, block_m, block_n, num_splits,
                                                           accumulate):
    _require_sm90()
    from dg_triton.heuristics.sm90 import make_fp8_config
    from dg_triton.testing import calc_diff

    if accumulate and kind == "1d2d":
        pytest.skip("SM90 FP8 accumulates only with the 1D1D recipe (API.md 1.3)")
    m, n, k = 200, 1000, 1040   # 9 K blocks, the last partial: uneven slices
    out_dtype = torch.float32 if kind == "1d1d" else torch.bfloat16
    a, b, a_q, sfa, b_q, sfb, dequant_ref = _operands(m, n, k, kind)
    c = torch.randn(m, n, device="cuda").mul_(32) if accumulate else None
    config = make_fp8_config(kind, m, n, block_m, block_n, num_splits, k, out_dtype.itemsize, 132)
    assert config is not None and config.num_splits == num_splits
    expected = dequant_ref + (c if c is not None else 0)
    # Twice: the per-tile counters must be left at zero for the next launch.
    for _ in range(2):
        d = c.clone() if accumulate else torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
        _run(a_q, sfa, b_q, sfb, d, m, n, k, kind, accumulate, config)
        assert torch.isfinite(d).all(), "unwritten (NaN) or non-finite output elements"
        assert calc_diff(d.float(), expected) < THRESHOLD


def test_fp8_kernel_split_k_on_two_streams_and_in_a_graph_at_once():
    """One split-K plan launched on two streams with no ordering between them, and replayed from
    a CUDA graph on a third stream at the same time: each must have its own FP32 workspace and
    counters (a shared set mixes the launches' partials). Two different problems of the same
    shape, so a mix-up cannot go unseen."""
    _require_sm90()
    from dg_triton.heuristics.sm90 import make_fp8_config
    from dg_triton.testing import calc_diff

    m, n, k = 128, 1024, 4096
    config = make_fp8_config("1d2d", m, n, 64, 64, 4, k, 2, 132)
    assert config is not None and config.num_splits == 4
    problems = [_operands(m, n, k, "1d2d") for _ in range(3)]
    outputs = [torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in problems]

    def launch(index):
        _, _, a_q, sfa, b_q, sfb, _ = problems[index]
        from dg_triton.kernels import sm90_fp8_gemm
        d = outputs[index]
        layout = (d.dtype, a_q.stride(), b_q.stride(), d.stride(), sfa.stride(), sfb.stride())
        problem = sm90_fp8_gemm.Fp8GemmProblem(m, n, k, "1d2d", d.device.index, None, layout)
        sm90_fp8_gemm.run("test", a_q, sfa, b_q, sfb, d, problem, False, "", config)

    graph_stream = torch.cuda.Stream()
    with torch.cuda.stream(graph_stream):
        launch(2)  # warm up (compile, plan) outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=graph_stream):
            launch(2)
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for _ in range(20):
        for index, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                launch(index)
        with torch.cuda.stream(graph_stream):
            graph.replay()
    torch.cuda.synchronize()
    for index, d in enumerate(outputs):
        assert torch.isfinite(d).all(), f"problem {index}: unwritten (NaN) or non-finite elements"
        assert calc_diff(d.float(), problems[index][6]) < THRESHOLD, f"problem {index}"


@pytest.mark.parametrize("block_n", (64, 128))
def test_fp8_kernel_skip_head_mid_writes_left_and_right_and_leaves_mid(block_n):
    _require_sm90()
    from dg_triton.heuristics.sm90 import make_fp8_config
    from dg_triton.testing import calc_diff

    left, mid, right = 128, 64, 128
    heads, m, k = 4, 200, 1024
    n = heads * (left + right)
    a, b, a_q, sfa, b_q, sfb, dequant_ref = _operands(m, n, k, "1d2d")
    sentinel = 12345.0
    d = torch.full((m, heads * (left + mid + right)), float("nan"), device="cuda", dtype=torch.bfloat16)
    d.view(m, heads, left + mid + right)[:, :, left:left + mid] = sentinel
    config = make_fp8_config("1d2d", m, n, 128, block_n, 1, k, 2, 132)
    _run(a_q, sfa, b_q, sfb, d, m, n, k, "1d2d", False, config, head_splits=(left, mid, right))
    out = d.view(m, heads, left + mid + right)
    assert (out[:, :, left:left + mid] == sentinel).all(), "mid columns were written"
    written = torch.cat([out[:, :, :left], out[:, :, left + mid:]], dim=2).reshape(m, n)
    assert torch.isfinite(written).all()
    assert calc_diff(written.float(), dequant_ref) < THRESHOLD
