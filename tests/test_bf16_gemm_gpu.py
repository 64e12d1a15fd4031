"""bf16_gemm_{nt,nn,tn,tt} on an SM90 GPU against dg_triton.reference (API.md 3.2, 8).

Every output is poisoned with NaN before the call, so a tile the kernel forgets to write fails the
finiteness check even where the reference would tolerate it. Threshold: calc_diff < 1e-5 (API.md 8).
"""
import zlib

import pytest
import torch

from cupti import needs_cupti
from shapes import (
    BF16_DENSE_BF16_OUT_NK, BF16_DENSE_DGRAD_MNK, BF16_DENSE_EDGE_M, BF16_DENSE_EDGE_NK,
    BF16_DENSE_FORWARD_M, BF16_DENSE_FP32_OUT_NK, BF16_DENSE_LARGE_NK, BF16_DENSE_TAIL_K,
    BF16_DENSE_TAIL_K_MN, BF16_DENSE_TAIL_N, BF16_DENSE_TAIL_N_MK, BF16_DENSE_WGRAD_MNK,
)

pytestmark = pytest.mark.gpu
if not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9):
    pytest.skip("needs an SM90 GPU", allow_module_level=True)

ALIASES = ("nt", "nn", "tn", "tt")
THRESHOLD = 1e-5
C_MODES = ("distinct", "in_place")
# The forward N of the costly pairs: it is dgrad's K and wgrad's M, and those runs are left out.
LARGE_N = {n for n, _ in BF16_DENSE_LARGE_NK}


@pytest.fixture(autouse=True)
def seed_per_test(request):
    # Fresh inputs per test, reproducible from the test id alone.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


def gemm(alias):
    import dg_triton
    return getattr(dg_triton, f"bf16_gemm_{alias}")


def calc_diff(x, y):
    from dg_triton.testing import calc_diff
    return calc_diff(x, y)


def gemm_reference(a, b, d, c, alias):
    from dg_triton.reference import gemm_reference
    return gemm_reference(a, b, d, c, alias)


def randn_matrix(rows, cols):
    """bf16 randn [rows, cols], row-major. A row of more than one element whose bytes are not a
    16-byte multiple is padded to one (TMA rule, API.md 1.2), as a caller must."""
    row_stride = cols if cols % 8 == 0 or cols == 1 or rows == 1 else (cols + 7) // 8 * 8
    return torch.randn(rows, row_stride, device="cuda", dtype=torch.bfloat16)[:, :cols]


def operands(alias, m, n, k):
    """(a, b) as the alias takes them: `n` passes a as [M, K] (K-major), `t` as [K, M]
    (MN-major); the second letter `t` passes b as [N, K], `n` as [K, N] (API.md 1.1)."""
    a = randn_matrix(m, k) if alias[0] == "n" else randn_matrix(k, m)
    b = randn_matrix(n, k) if alias[1] == "t" else randn_matrix(k, n)
    return a, b


def nan_output(m, n, dtype):
    return torch.full((m, n), float("nan"), device="cuda", dtype=dtype)


def accumulator(m, n, dtype):
    return (torch.randn(m, n, device="cuda") * 32).to(dtype)


def run_and_check(alias, a, b, d, c=None, **kwargs):
    """Calls the alias and checks d against the reference (computed first: c may be d)."""
    expected = gemm_reference(a, b, d, c, alias)
    gemm(alias)(a, b, d, c, **kwargs)
    torch.cuda.synchronize()
    assert torch.isfinite(d).all(), "some of d left unwritten (NaN poison) or overflowed"
    diff = calc_diff(d, expected)
    assert diff < THRESHOLD, f"calc_diff {diff:.3g} >= {THRESHOLD}"


def forward_cases():
    for n, k in BF16_DENSE_BF16_OUT_NK + BF16_DENSE_FP32_OUT_NK:
        out_dtype = torch.bfloat16 if (n, k) in BF16_DENSE_BF16_OUT_NK else torch.float32
        for m in BF16_DENSE_FORWARD_M:
            for alias in ALIASES:
                if (n, k) in BF16_DENSE_LARGE_NK and m == 4096 and alias != "nt":
                    continue
                yield pytest.param(alias, m, n, k, out_dtype, id=f"{alias}-{m}x{n}x{k}-{str(out_dtype)[6:]}")


@pytest.mark.parametrize("alias,m,n,k,out_dtype", list(forward_cases()))
def test_bf16_gemm_matches_reference_on_deepseek_forward_shapes(alias, m, n, k, out_dtype):
    a, b = operands(alias, m, n, k)
    run_and_check(alias, a, b, nan_output(m, n, out_dtype))


def accumulation_cases():
    # Every forward (N, K) in `nt`; the other aliases on one pair of each output dtype.
    for n, k in BF16_DENSE_BF16_OUT_NK + BF16_DENSE_FP32_OUT_NK:
        out_dtype = torch.bfloat16 if (n, k) in BF16_DENSE_BF16_OUT_NK else torch.float32
        aliases = ALIASES if (n, k) in (BF16_DENSE_BF16_OUT_NK[0], BF16_DENSE_FP32_OUT_NK[0]) else ("nt",)
        for alias in aliases:
            yield pytest.param(alias, 128, n, k, out_dtype, id=f"{alias}-128x{n}x{k}-{str(out_dtype)[6:]}")


@pytest.mark.parametrize("c_mode", C_MODES)
@pytest.mark.parametrize("alias,m,n,k,out_dtype", list(accumulation_cases()))
def test_bf16_gemm_adds_c_to_the_product(alias, m, n, k, out_dtype, c_mode):
    a, b = operands(alias, m, n, k)
    c = accumulator(m, n, out_dtype)
    if c_mode == "in_place":
        run_and_check(alias, a, b, c, c)
    else:
        c_before = c.clone()
        run_and_check(alias, a, b, nan_output(m, n, out_dtype), c)
        assert torch.equal(c, c_before), "c was written"


@pytest.mark.parametrize("m,n,k", [(m, n, k) for m, n, k in BF16_DENSE_DGRAD_MNK if k not in LARGE_N],
                         ids=lambda v: str(v))
def test_bf16_gemm_matches_reference_on_dgrad_shapes(m, n, k):
    # dX = dY @ W: B is the weight W [N_fwd, K_fwd] = [K, N] as stored, i.e. MN-major -> `nn`.
    # The LM-head pair is left out: its one M=4096 run is the forward test's.
    a, b = operands("nn", m, n, k)
    run_and_check("nn", a, b, nan_output(m, n, torch.bfloat16))


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16], ids=["fp32-acc", "bf16"])
@pytest.mark.parametrize("m,n,k", [(m, n, k) for m, n, k in BF16_DENSE_WGRAD_MNK if m not in LARGE_N],
                         ids=lambda v: str(v))
def test_bf16_gemm_matches_reference_on_wgrad_shapes(m, n, k, out_dtype):
    # A and B both MN-major -> `tn`; the fp32 gradient accumulates in place (c is d), the bf16 one not.
    a, b = operands("tn", m, n, k)
    if out_dtype == torch.float32:
        d = accumulator(m, n, out_dtype)
        run_and_check("tn", a, b, d, d)
    else:
        run_and_check("tn", a, b, nan_output(m, n, out_dtype))


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("m", BF16_DENSE_EDGE_M)
def test_bf16_gemm_handles_m_smaller_than_a_tile_or_just_past_one(m, alias, out_dtype):
    n, k = BF16_DENSE_EDGE_NK
    a, b = operands(alias, m, n, k)
    run_and_check(alias, a, b, nan_output(m, n, out_dtype))


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("n", BF16_DENSE_TAIL_N)
def test_bf16_gemm_handles_n_not_a_multiple_of_the_block(n, alias):
    m, k = BF16_DENSE_TAIL_N_MK
    a, b = operands(alias, m, n, k)
    run_and_check(alias, a, b, nan_output(m, n, torch.bfloat16))


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("k", BF16_DENSE_TAIL_K)
def test_bf16_gemm_handles_k_not_a_multiple_of_the_block(k, alias):
    m, n = BF16_DENSE_TAIL_K_MN
    a, b = operands(alias, m, n, k)
    run_and_check(alias, a, b, nan_output(m, n, torch.bfloat16))


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("alias", ALIASES)
def test_bf16_gemm_writes_only_the_columns_of_a_padded_output(alias, out_dtype):
    # D and C with row strides past N (API.md 1.2): the padding columns must stay as they were.
    m, n, k = 129, 2120, 1536
    a, b = operands(alias, m, n, k)
    d_rows = torch.full((m, n + 24), float("nan"), device="cuda", dtype=out_dtype)
    c = accumulator(m, n + 40, out_dtype)[:, :n]
    d = d_rows[:, :n]
    run_and_check(alias, a, b, d, c)
    assert torch.isnan(d_rows[:, n:]).all(), "padding columns of d were written"


@pytest.mark.parametrize("compiled_dims", ["", "m", "nk", "mn", "mnk"])
@pytest.mark.parametrize("alias", ["nt", "tn"])
def test_bf16_gemm_result_does_not_depend_on_compiled_dims(alias, compiled_dims):
    m, n, k = 129, 576, 7168
    a, b = operands(alias, m, n, k)
    run_and_check(alias, a, b, nan_output(m, n, torch.bfloat16), compiled_dims=compiled_dims)


def test_bf16_gemm_cuda_graph_replay_matches_eager_bitwise():
    alias, (m, n, k) = "tn", (129, 2112, 7168)
    a, b = operands(alias, m, n, k)
    c = accumulator(m, n, torch.float32)

    def eager():
        d = nan_output(m, n, torch.float32)
        gemm(alias)(a, b, d, c)  # the first call also JIT-compiles, outside the capture
        torch.cuda.synchronize()
        return d

    d_eager = eager()
    d_graph = nan_output(m, n, torch.float32)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemm(alias)(a, b, d_graph, c)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.isfinite(d_graph).all()
    assert torch.equal(d_graph.view(torch.int32), d_eager.view(torch.int32))

    # A replay reads the captured buffers: new inputs written into them give the new product.
    a.copy_(torch.randn_like(a))
    b.copy_(torch.randn_like(b))
    c.copy_(torch.randn_like(c) * 32)
    d_graph.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(d_graph.view(torch.int32), eager().view(torch.int32))


@needs_cupti
@pytest.mark.parametrize("m,n,k", [(128, 2112, 7168), (64, 576, 7168)])
def test_a_captured_split_k_bf16_gemm_replays_as_its_kernel_alone(m, n, k):
    """A split-K call (the heuristics split these shapes) captured in a CUDA graph replays as the
    GEMM kernel alone: its counters come zeroed from the reserve an eager launch made, not from a
    fill captured with it; and the replays are right (twice: the counters must stay zeroed)."""
    from dg_triton.heuristics.sm90 import choose_bf16_gemm_config
    from dg_triton.testing import replay_kernel_names

    assert choose_bf16_gemm_config(m, n, k, 2, 132).num_splits > 1
    a, b = operands("nt", m, n, k)
    d = nan_output(m, n, torch.bfloat16)
    gemm("nt")(a, b, d)   # compile and plan, eagerly: the reserve is made here
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemm("nt")(a, b, d)
    assert replay_kernel_names(graph) == ["sm90_bf16_gemm"]
    for _ in range(2):
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.isfinite(d).all()
        diff = calc_diff(d, gemm_reference(a, b, d, None, "nt"))
        assert diff < THRESHOLD, f"calc_diff {diff:.3g} >= {THRESHOLD}"


def test_bf16_gemm_two_shapes_captured_in_one_cuda_graph_are_both_correct():
    problems = [  # (alias, m, n, k, out dtype)
        ("nt", 128, 2112, 7168, torch.bfloat16),
        ("nn", 7, 576, 1536, torch.float32),
    ]
    tensors = []
    for alias, m, n, k, out_dtype in problems:
        a, b = operands(alias, m, n, k)
        d = nan_output(m, n, out_dtype)
        gemm(alias)(a, b, d)  # compile outside the capture
        tensors.append((alias, a, b, d))
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for alias, a, b, d in tensors:
            gemm(alias)(a, b, d)
    for _, _, _, d in tensors:
        d.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    for alias, a, b, d in tensors:
        assert torch.isfinite(d).all(), alias
        diff = calc_diff(d, gemm_reference(a, b, d, None, alias))
        assert diff < THRESHOLD, f"{alias}: calc_diff {diff:.3g} >= {THRESHOLD}"


# Forced configs: the heuristics pick one config per shape, so these cover the kernel features
# every config may use (TMA multicast clusters, split-K, narrow and wide tiles) on every layout.
FORCED_CONFIGS = [
    # (block_m, block_n, num_splits, cluster_m, cluster_n)
    (128, 256, 1, 1, 2), (128, 128, 1, 1, 2), (64, 128, 1, 1, 2), (64, 64, 1, 1, 2),
    (128, 64, 4, 1, 2), (64, 64, 3, 1, 2), (128, 144, 1, 1, 1), (64, 48, 5, 1, 1), (128, 16, 2, 1, 1),
    # clusters along M sharing B: wide and odd-atom tiles, split-K, both block_m
    (128, 256, 1, 2, 1), (128, 192, 1, 2, 1), (64, 128, 1, 2, 1), (128, 64, 3, 2, 1), (64, 80, 1, 2, 1),
]


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("out_dtype", (torch.bfloat16, torch.float32))
@pytest.mark.parametrize("accumulate", (False, True))
@pytest.mark.parametrize("block_m,block_n,num_splits,cluster_m,cluster_n", FORCED_CONFIGS)
def test_bf16_gemm_forced_configs_match_reference(alias, out_dtype, accumulate, block_m, block_n,
                                                  num_splits, cluster_m, cluster_n):
    from dg_triton import validation
    from dg_triton.heuristics.sm90 import make_config
    from dg_triton.kernels import sm90_bf16_gemm

    b_k_major = alias[1] == "t"
    if not b_k_major and block_n % 64:
        pytest.skip("an MN-major B needs block_n to be a multiple of 64")
    m, n, k = 200, 1024, 1000   # M and K tails (an even number of M blocks for cluster_m = 2)
    n = n if n % (block_n * cluster_n) == 0 else block_n * cluster_n * 4
    a, b = operands(alias, m, n, k)
    d = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    c = torch.randn(m, n, device="cuda").mul_(32).to(out_dtype) if accumulate else None
    expected = gemm_reference(a, b, d, c, alias)
    if c is not None:
        d.copy_(c)
    a_nt = a if alias[0] == "n" else a.T
    b_nt = b if alias[1] == "t" else b.T
    config = make_config(m, n, block_m, block_n, num_splits, k, d.element_size(), 132, cluster_n,
                         cluster_m)
    if config is None:
        pytest.skip(f"{block_m}x{block_n} does not fit 3 stages with {out_dtype} output")
    assert (config.cluster_m, config.cluster_n) == (cluster_m, cluster_n)
    problem = validation.bf16_gemm("test", a_nt, b_nt, d, c)
    sm90_bf16_gemm.run("test", a_nt, b_nt, d, problem[:7], problem[7], accumulate, "", config)
    torch.cuda.synchronize()
    assert torch.isfinite(d).all()
    assert calc_diff(d.float(), expected.float()) < THRESHOLD


@pytest.mark.parametrize("block_m,block_n,cluster_m,cluster_n", ((128, 256, 1, 1), (64, 96, 1, 1),
                                                                 (128, 128, 2, 1), (128, 64, 1, 2)))
def test_bf16_gemm_every_l2_group_equals_group_8_bitwise(block_m, block_n, cluster_m, cluster_n):
    """The L2 group only reorders the tiles a CTA takes (scheduler.cuh swizzle), so every group's
    output equals group 8's bit for bit: groups 1, 3 and 32 included (a last partial group), M and
    N tails, eight CTAs walking many tiles each."""
    import dataclasses
    from dg_triton import validation
    from dg_triton.heuristics.sm90 import make_config
    from dg_triton.kernels import sm90_bf16_gemm

    # M and N tails with whole clusters along each axis; D rows of 2608 / 2480 bytes (TMA needs
    # multiples of 16)
    m, n, k = 1500, 1240 if cluster_n == 2 else 1304, 520
    assert -(-m // block_m) % cluster_m == 0 and -(-n // block_n) % cluster_n == 0
    a, b = operands("nt", m, n, k)
    expected = gemm_reference(a, b, torch.empty(m, n, dtype=torch.bfloat16, device="cuda"), None, "nt")
    config = make_config(m, n, block_m, block_n, 1, k, 2, 8, cluster_n, cluster_m)
    assert config is not None
    outputs = {}
    for group_m in (8, 1, 2, 3, 16, 32):
        d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        problem = validation.bf16_gemm("test", a, b, d, None)
        sm90_bf16_gemm.run("test", a, b, d, problem[:7], problem[7], False, "",
                           dataclasses.replace(config, group_m=group_m))
        torch.cuda.synchronize()
        assert torch.isfinite(d).all(), f"group {group_m}: unwritten (NaN) or non-finite elements"
        outputs[group_m] = d
    assert calc_diff(outputs[8].float(), expected.float()) < THRESHOLD
    for group_m, d in outputs.items():
        assert torch.equal(d, outputs[8]), f"group {group_m} differs from group 8"


def in_place_builds(a_nt, b_nt, c, config, probe_builds):
    """D = c + A @ B in place (d starts as a copy of c) through the kernel with `config`, once per
    probe build (a tuple of kernel macros; () is the default build): the D of each."""
    from dg_triton import validation
    from dg_triton.kernels import sm90_bf16_gemm

    outputs = []
    for defines in probe_builds:
        d = c.clone()
        problem = validation.bf16_gemm("test", a_nt, b_nt, d, d)
        sm90_bf16_gemm.run("test", a_nt, b_nt, d, problem[:7], problem[7], True, "", config, defines)
        torch.cuda.synchronize()
        outputs.append(d)
    return outputs


@pytest.mark.parametrize("alias", ("nt", "tn"))
@pytest.mark.parametrize("block_m,block_n", ((128, 256), (64, 64)))
# early-load probe: c loaded after issuing K block 12 of 16 (0-based), 20 of 24, 2 of 6; at the
# store with 5 K blocks and one (the serial-add probe: the same store at every k)
@pytest.mark.parametrize("k", (1000, 1536, 384, 320, 64))
def test_bf16_gemm_early_c_load_and_serial_add_probes_equal_the_default_build(alias, block_m, block_n, k):
    """The load of c under the K loop (DG_PROBE_EARLY_C_LOAD, bf16_gemm.cuh kEarlyCLoad) and the
    epilogue's c added one pair at a time (DG_PROBE_SERIAL_C_ADD, epilogue.cuh) on an FP32 D += c,
    more tiles than SMs: bitwise equal to the default build, which loads c at the store and adds
    it in batches (same arithmetic, same order), and to the reference."""
    from dg_triton.heuristics.sm90 import make_config

    m, n = 2000, 4096
    a, b = operands(alias, m, n, k)
    c = torch.randn(m, n, device="cuda").mul_(32)
    a_nt = a if alias[0] == "n" else a.T
    b_nt = b if alias[1] == "t" else b.T
    config = make_config(m, n, block_m, block_n, 1, k, 4, 132)
    assert config is not None and -(-m // block_m) * -(-n // block_n) > config.num_sms
    outputs = in_place_builds(a_nt, b_nt, c, config,
                              ((), ("DG_PROBE_EARLY_C_LOAD",), ("DG_PROBE_SERIAL_C_ADD",)))
    assert torch.equal(outputs[1], outputs[0]), "the early load of c changed the result"
    assert torch.equal(outputs[2], outputs[0]), "the batched c add changed the result"
    assert calc_diff(outputs[1], gemm_reference(a, b, outputs[1], c, alias).float()) < THRESHOLD


@pytest.mark.parametrize("block_m,block_n", ((128, 256), (64, 64)))
def test_bf16_gemm_batched_c_add_equals_the_serial_probe_with_a_bf16_d(block_m, block_n):
    """A bf16 D += c in place (c read from bf16, summed in FP32, rounded once): the default build's
    batched c add against DG_PROBE_SERIAL_C_ADD (one pair at a time), more tiles than SMs: bitwise
    equal, and equal to the reference (an element left as c, or a pair added to the wrong c,
    would not be)."""
    from dg_triton.heuristics.sm90 import make_config

    m, n, k = 2000, 4096, 1000
    a, b = operands("nt", m, n, k)
    c = torch.randn(m, n, device="cuda").mul_(32).to(torch.bfloat16)
    config = make_config(m, n, block_m, block_n, 1, k, 2, 132)
    assert config is not None and -(-m // block_m) * -(-n // block_n) > config.num_sms
    outputs = in_place_builds(a, b, c, config, ((), ("DG_PROBE_SERIAL_C_ADD",)))
    assert torch.equal(outputs[1], outputs[0]), "the batched c add changed the result"
    assert calc_diff(outputs[0].float(), gemm_reference(a, b, outputs[0], c, "nt").float()) < THRESHOLD


@pytest.mark.parametrize("alias", ("nt", "tn"))
@pytest.mark.parametrize("block_n,out_dtype,accumulate", ((144, torch.bfloat16, False),
                                                          (176, torch.bfloat16, False),
                                                          (192, torch.bfloat16, False),
                                                          (224, torch.bfloat16, False),
                                                          (144, torch.float32, True),
                                                          (112, torch.float32, True),
                                                          (256, torch.float32, True)))
def test_bf16_gemm_deep_ring_with_narrow_staging_equals_the_default_ring(alias, block_n, out_dtype,
                                                                          accumulate):
    """A ring deeper than the epilogue's default staging leaves room for stores each tile in
    narrower chunks of slabs (SwizzledTmaStoreEpilogue's kMaxChunkSlabs; with c, each chunk's c is
    loaded on its own): bitwise equal to the same tile at its default depth, more tiles than SMs,
    M and N tails, every element written, and equal to the reference."""
    import dataclasses

    from dg_triton import validation
    from dg_triton.heuristics import sm90 as heuristics
    from dg_triton.kernels import sm90_bf16_gemm

    if alias[1] == "n" and block_n % 64:
        pytest.skip("an MN-major B needs block_n to be a multiple of 64")
    m, n, k = 2000, 2504, 1000
    a, b = operands(alias, m, n, k)
    c = torch.randn(m, n, device="cuda").mul_(32) if accumulate else None
    a_nt = a if alias[0] == "n" else a.T
    b_nt = b if alias[1] == "t" else b.T
    base = heuristics.make_config(m, n, 128, block_n, 1, k, out_dtype.itemsize, 132)
    deep = heuristics.max_stages(128, block_n, out_dtype.itemsize, cap=12, narrow_staging=True)
    assert base is not None and deep > base.num_stages
    assert heuristics.epilogue_chunk_cols(128, block_n, deep, out_dtype.itemsize) < \
        heuristics.epilogue_chunk_cols(128, block_n, base.num_stages, out_dtype.itemsize)
    outputs = []
    for stages in (base.num_stages, deep):
        d = c.clone() if accumulate else torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
        problem = validation.bf16_gemm("test", a_nt, b_nt, d, d if accumulate else None)
        sm90_bf16_gemm.run("test", a_nt, b_nt, d, problem[:7], problem[7], accumulate, "",
                           dataclasses.replace(base, num_stages=stages))
        torch.cuda.synchronize()
        assert torch.isfinite(d).all(), f"{stages} stages: unwritten (NaN) or non-finite elements"
        outputs.append(d)
    assert torch.equal(outputs[1], outputs[0]), "the narrow staging changed the result"
    assert calc_diff(outputs[1].float(), gemm_reference(a, b, outputs[1], c, alias).float()) < THRESHOLD


# ---- warm calls (gemm.py's table of plans by argument signature) -------------------------------

@pytest.mark.parametrize("alias", ALIASES)
def test_bf16_gemm_warm_calls_with_fresh_tensors_of_one_signature_are_each_correct(alias):
    # The second and later calls skip validation and the plan lookup; each must still launch on
    # its own operands' addresses.
    for _ in range(3):
        a, b = operands(alias, 129, 320, 384)
        run_and_check(alias, a, b, nan_output(129, 320, torch.bfloat16))


def test_bf16_gemm_warm_call_still_rejects_a_misaligned_operand():
    from dg_triton.errors import DGArgumentError
    a, b = operands("nt", 64, 256, 256)
    run_and_check("nt", a, b, nan_output(64, 256, torch.bfloat16))
    # Same shape and strides as the warm call, base address 2 bytes off: the full checks run.
    storage = torch.randn(64 * 256 + 1, device="cuda", dtype=torch.bfloat16)
    shifted = storage[1:].view(64, 256)
    with pytest.raises(DGArgumentError, match="16-byte aligned"):
        gemm("nt")(shifted, b, nan_output(64, 256, torch.bfloat16))


def test_bf16_gemm_warm_calls_follow_c_and_settings_changes():
    import dg_triton
    a, b = operands("nt", 256, 512, 512)
    d = nan_output(256, 512, torch.float32)
    run_and_check("nt", a, b, d)
    run_and_check("nt", a, b, d, c=d)          # same tensors, now accumulating in place
    run_and_check("nt", a, b, d, c=accumulator(256, 512, torch.float32))
    from dg_triton import settings
    saved = settings._num_sms
    try:
        dg_triton.set_num_sms(7)               # a new grid: a new plan, not the warm one
        run_and_check("nt", a, b, nan_output(256, 512, torch.float32))
    finally:
        dg_triton.set_num_sms(saved)


@pytest.mark.parametrize("element,inner,outer,row_bytes,box_inner,box_outer,swizzle", [
    (2, 7168, 4096, 14336, 64, 128, 128), (2, 2112, 129, 4224, 64, 64, 128),
    (4, 576, 4096, 2304, 32, 64, 128), (1, 7168, 64, 7168, 128, 64, 128), (2, 256, 1, 512, 16, 64, 32)])
def test_tma_descriptors_from_the_ctypes_encoder_equal_cuda_bindings(element, inner, outer, row_bytes,
                                                                     box_inner, box_outer, swizzle):
    import ctypes
    from dg_triton.jit import tma
    params = tma.Tma2dParams(element, inner, outer, row_bytes, box_inner, box_outer, swizzle)
    t = torch.empty(outer * row_bytes + 256, device="cuda", dtype=torch.uint8)
    cache = tma.DescriptorCache(params)
    for offset in (0, 16, 4096):
        address = t.data_ptr() + offset
        assert cache(address) % 64 == 0
        assert ctypes.string_at(cache(address), 128) == tma.encode(params, address)
