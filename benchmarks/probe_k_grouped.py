"""Probe: a k-grouped GEMM as one persistent launch over the groups (the shipped path,
dg_triton.k_grouped_fp8_gemm_nt_contiguous, or with --bf16 k_grouped_bf16_gemm_tn_contiguous with
an fp32 D) against one launch of the dense kernel per group (the path before it, rebuilt here from
sm90_fp8_gemm.run / sm90_bf16_gemm.run), on bench_grouped.py's k-grouped shapes, with the dense GEMM
at equal total K as the common yardstick (FP8: fp8_gemm_nt 1D1D, BF16: bf16_gemm_tn, both fp32
d = c). Timed in alternation, each round starting one further along the list (CUDA-graph replays,
bench_graph's method), d = c accumulating; medians of the rounds.

Checks before timing: the shipped path against the reference (calc_diff < 1e-3 FP8, 1e-5 BF16),
and, with the per-group launches forced to the shipped tile config, the two paths bit for bit (same
tiles, same K-block order, so the same sums). --variants adds one-launch probe builds (kernel
macros, e.g. DG_PROBE_C_LOAD_LEAD_8 for FP8, DG_PROBE_EARLY_C_LOAD for BF16; "cfg=128x128s4" forces
a tile, "grid=128" the persistent grid), each checked against the reference and, unless it forces a
tile (other tiles sum in another order), bit for bit against the shipped build.

    python benchmarks/probe_k_grouped.py [--bf16] [--shapes 16x4096x7168x2048,...] [--rounds 5]
                                         [--variants A,B+C]
"""
import argparse
import dataclasses
import random
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dg_triton  # noqa: E402
from dg_triton import reference_k_grouped, testing  # noqa: E402
from dg_triton.heuristics.sm90 import make_config, make_fp8_config  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm, sm90_fp8_gemm, sm90_k_grouped_gemm  # noqa: E402
from dg_triton.reference_k_grouped import k_grouped_starts  # noqa: E402
from dg_triton.utils.math import align  # noqa: E402

SHAPES = [(4, 4096, 7168, 8192), (4, 7168, 2048, 8192), (8, 4096, 7168, 4096), (8, 7168, 2048, 4096),
          (16, 4096, 7168, 2048), (16, 7168, 2048, 2048)]


def per_group_launches(a_fp8, b_fp8, d, ks, m, n, config=None):
    """The earlier k_grouped.py FP8 path: one dense 1D1D launch per non-empty group (d holds c)."""
    (a, sfa), (b, sfb) = a_fp8, b_fp8
    sfa, sfb = dg_triton.get_mn_major_tma_aligned_tensor(sfa), dg_triton.get_mn_major_tma_aligned_tensor(sfb)
    a_flat, b_flat = a.view(-1), b.view(-1)
    calls = []
    for g, (k, start) in enumerate(zip(ks, k_grouped_starts(ks))):
        if k == 0:
            continue
        a_g = a_flat[m * start:m * (start + k)].view(m, k)
        b_g = b_flat[n * start:n * (start + k)].view(n, k)
        columns = slice(start // 128, (start + k) // 128)
        sfa_g, sfb_g, d_g = sfa[:, columns], sfb[:, columns], d[g]
        problem = sm90_fp8_gemm.Fp8GemmProblem(m, n, k, "1d1d", d.device.index, None,
                                               (d.dtype, a_g.stride(), b_g.stride(), d_g.stride(),
                                                sfa_g.stride(), sfb_g.stride()))
        calls.append((a_g, sfa_g, b_g, sfb_g, d_g, problem))

    def run():
        for a_g, sfa_g, b_g, sfb_g, d_g, problem in calls:
            sm90_fp8_gemm.run("probe", a_g, sfa_g, b_g, sfb_g, d_g, problem, True, "mn", config)
    return run


def forced_config(variant, m, n, ks, bf16):
    """The config of a probe variant, None for the shipped pick: "cfg=<block_m>x<block_n>s<stages>"
    forces a tile, "grid=<CTAs>" the persistent grid (of the forced tile, else of the shipped one)."""
    groups = min(sum(k > 0 for k in ks), sm90_k_grouped_gemm.MAX_GROUPS_PER_LAUNCH)
    config = None
    for v in variant:
        if v.startswith("cfg="):
            block_m, rest = v[4:].split("x")
            block_n, stages = (int(x) for x in rest.split("s"))
            base = (make_config(m, n, int(block_m), block_n, 1, 2048, 4, 132) if bf16
                    else make_fp8_config("1d1d", m, n, int(block_m), block_n, 1, 2048, 4, 132))
            tiles = -(-m // base.block_m) * -(-n // base.block_n)
            config = dataclasses.replace(base, num_stages=stages, num_sms=min(132, tiles * groups))
    for v in variant:
        if v.startswith("grid="):
            if config is None:
                config = (sm90_k_grouped_gemm.choose_bf16_config(m, n, ks, groups, 4, 132) if bf16
                          else sm90_k_grouped_gemm.choose_config(m, n, ks, groups, 132))
            config = dataclasses.replace(config, num_sms=int(v[5:]))
    return config


def probe_launch(a_fp8, b_fp8, d, ks, m, n, variant):
    """The shipped one-launch call (k_grouped.py's arguments) of a probe build: `variant` holds
    kernel macros and at most one forced tile or grid (forced_config)."""
    (a, sfa), (b, sfb) = a_fp8, b_fp8
    sfa, sfb = dg_triton.get_mn_major_tma_aligned_tensor(sfa), dg_triton.get_mn_major_tma_aligned_tensor(sfb)
    key = (m, n, tuple(ks), d.device.index, sfa.stride(), sfb.stride())
    defines = tuple(v for v in variant if "=" not in v)
    config = forced_config(variant, m, n, ks, bf16=False)
    return lambda: sm90_k_grouped_gemm.run("probe", a.view(-1), sfa, b.view(-1), sfb, d, m, n, list(ks),
                                           k_grouped_starts(ks), key, config, defines)


def check_groups(d, expected, ks, threshold, what):
    """Every non-empty group of d against the reference, calc_diff < threshold, all finite."""
    diff = max(float(testing.calc_diff(d[g], expected[g])) for g in range(len(ks)) if ks[g])
    assert torch.isfinite(d).all() and diff < threshold, f"{what}: calc_diff {diff}"


def add_variants(fns, variants, make, c, d_one, expected, ks, threshold, shape):
    """fns[variant] = make(d_variant, variant) for each probe variant, after one checked run: bit for
    bit the shipped build's d_one, or, where it forces a tile (another summation order), the
    reference."""
    for variant in variants:
        d_variant = c.clone()
        fns[variant] = make(d_variant, variant)
        fns[variant]()
        torch.cuda.synchronize()
        if any(v.startswith("cfg=") for v in variant):
            check_groups(d_variant, expected, ks, threshold, f"{shape} {variant}")
        else:
            assert torch.equal(d_variant, d_one), f"{shape} {variant}: differs from the shipped build"


def fp8_functions(shape, num_groups, m, n, ks, variants):
    """{name: call} of one FP8 shape, each checked (module docstring), and the shipped config."""
    sum_k = sum(ks)
    a = torch.randn(sum_k, m, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(sum_k, n, dtype=torch.bfloat16, device="cuda")
    a_fp8 = reference_k_grouped.k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(a, False), ks)
    b_fp8 = reference_k_grouped.k_grouped_nt_operand(*dg_triton.per_channel_cast_to_fp8(b, False), ks)
    c = torch.randn(num_groups, m, n, device="cuda").mul_(32)
    layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    d_one, d_per = c.clone(), c.clone()
    one = lambda: dg_triton.k_grouped_fp8_gemm_nt_contiguous(a_fp8, b_fp8, d_one, ks, layout, c=d_one)  # noqa: E731
    one()
    torch.cuda.synchronize()
    expected = reference_k_grouped.k_grouped_bf16_tn_reference(a, b, c, ks)
    check_groups(d_one, expected, ks, 1e-3, shape)
    plan = next(p for key, p in sm90_k_grouped_gemm._plans.items()
                if key[0][:3] == (m, n, tuple(ks)) and key[2:] == (None, ()))
    config = plan.spec.config
    forced = per_group_launches(a_fp8, b_fp8, d_per, ks, m, n, config)
    forced()
    torch.cuda.synchronize()
    assert torch.equal(d_one, d_per), f"{shape}: one launch and per-group launches differ"
    per_group = per_group_launches(a_fp8, b_fp8, d_per, ks, m, n)   # the heuristics' per-group tiles
    a_dense = dg_triton.per_token_cast_to_fp8(torch.randn(m, sum_k, dtype=torch.bfloat16, device="cuda"),
                                              False, tma_aligned_sf=True)
    b_dense = dg_triton.per_token_cast_to_fp8(torch.randn(n, sum_k, dtype=torch.bfloat16, device="cuda"),
                                              False, tma_aligned_sf=True)
    d_dense = torch.randn(m, n, device="cuda")
    dense = lambda: dg_triton.fp8_gemm_nt(a_dense, b_dense, d_dense, c=d_dense, recipe=(1, 1, 128))  # noqa: E731
    fns = {"one": one, "per": per_group, "dense": dense}
    add_variants(fns, variants, lambda d_variant, variant: probe_launch(a_fp8, b_fp8, d_variant, ks, m, n, variant), c, d_one, expected, ks,
                 1e-3, shape)
    return fns, config


def bf16_per_group_launches(a, b, d, ks, m, n, config=None):
    """The earlier k_grouped.py BF16 path: one dense launch (A and B MN-major) per non-empty group."""
    calls = []
    for g, (k, start) in enumerate(zip(ks, k_grouped_starts(ks))):
        if k:
            a_g, b_g, d_g = a.narrow(0, start, k).T, b.narrow(0, start, k).T, d[g]
            # (A / B K-major where M / N is 1, as validation._operand_major says.)
            problem = (m, n, k, m == 1, n == 1, d.device.index, (d.dtype, a_g.stride(), b_g.stride(), d_g.stride()))
            calls.append((a_g, b_g, d_g, problem, (a_g.data_ptr(), b_g.data_ptr(), d_g.data_ptr())))

    def run():
        for a_g, b_g, d_g, problem, addresses in calls:
            sm90_bf16_gemm.run("probe", a_g, b_g, d_g, problem, addresses, True, "mn", config)
    return run


def bf16_probe_launch(a, b, d, ks, m, n, variant):
    """The shipped BF16 one-launch call of a probe build: kernel macros and at most one forced tile
    or grid (forced_config)."""
    key = (m, n, tuple(ks), d.device.index, d.dtype)
    defines = tuple(v for v in variant if "=" not in v)
    return lambda: sm90_k_grouped_gemm.run_bf16("probe", a, b, d, m, n, list(ks), k_grouped_starts(ks), key,
                                                forced_config(variant, m, n, ks, bf16=True), defines)


def bf16_functions(shape, num_groups, m, n, ks, variants):
    """{name: call} of one --bf16 shape, each checked (module docstring), and the shipped config."""
    sum_k = sum(ks)
    a = torch.randn(sum_k, m, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(sum_k, n, dtype=torch.bfloat16, device="cuda")
    c = torch.randn(num_groups, m, n, device="cuda").mul_(32)
    layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    d_one, d_per = c.clone(), c.clone()
    one = lambda: dg_triton.k_grouped_bf16_gemm_tn_contiguous(a, b, d_one, ks, layout, c=d_one)  # noqa: E731
    one()
    torch.cuda.synchronize()
    expected = reference_k_grouped.k_grouped_bf16_tn_reference(a, b, c, ks)
    check_groups(d_one, expected, ks, 1e-5, shape)
    plan = next(p for key, p in sm90_k_grouped_gemm._bf16_plans.items()
                if key[0][:3] == (m, n, tuple(ks)) and key[2:] == (None, ()))
    config = plan.spec.config
    bf16_per_group_launches(a, b, d_per, ks, m, n, config)()
    torch.cuda.synchronize()
    assert torch.equal(d_one, d_per), f"{shape}: one launch and per-group launches differ"
    fns = {"one": one, "per": bf16_per_group_launches(a, b, d_per, ks, m, n)}
    a_dense = torch.randn(sum_k, m, dtype=torch.bfloat16, device="cuda")
    b_dense = torch.randn(sum_k, n, dtype=torch.bfloat16, device="cuda")
    d_dense = torch.randn(m, n, device="cuda")
    fns["dense"] = lambda: dg_triton.bf16_gemm_tn(a_dense, b_dense, d_dense, c=d_dense)  # noqa: E731
    add_variants(fns, variants, lambda d_variant, variant: bf16_probe_launch(a, b, d_variant, ks, m, n, variant), c, d_one, expected, ks,
                 1e-5, shape)
    return fns, config


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                        help="comma-separated GxMxNxexpected_k")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bf16", action="store_true", help="the BF16 form (k_grouped_bf16_gemm_tn_contiguous)")
    parser.add_argument("--variants", default="", help="comma-separated macro sets ('+' joins macros; "
                        "cfg=128x128s4 forces a tile)")
    args = parser.parse_args()
    variants = [tuple(v for v in group.split("+") if v) for group in args.variants.split(",") if group]
    random.seed(0)
    rows = ["| groups x M x N x exp. K | sum K | config | one launch us | per group us | dense us | "
            "one launch vs dense | per group vs dense | one launch speed-up |"
            + "".join(f" {'+'.join(v)} us (vs dense) |" for v in variants), "|---" * (9 + len(variants)) + "|"]
    for shape in args.shapes.split(","):
        num_groups, m, n, expected_k = (int(x) for x in shape.split("x"))
        ks = [align(max(1, int(expected_k * random.uniform(0.7, 1.3))), 128) for _ in range(num_groups)]
        sum_k = sum(ks)
        if args.bf16:
            fns, config = bf16_functions(shape, num_groups, m, n, ks, variants)
        else:
            fns, config = fp8_functions(shape, num_groups, m, n, ks, variants)
        times = {name: [] for name in fns}
        order = list(fns)
        for r in range(args.rounds):   # each round starts one further on: no variant always runs first
            for name in order[r % len(order):] + order[:r % len(order)]:
                times[name].append(testing.bench_graph(fns[name]))
        t = {name: statistics.median(v) for name, v in times.items()}
        rows.append(f"| {num_groups}x{m}x{n}x{expected_k} | {sum_k} | {config.block_m}x{config.block_n}s{config.num_stages} "
                    f"| {t['one']:.1f} | {t['per']:.1f} | {t['dense']:.1f} | {t['dense'] / t['one']:.3f} "
                    f"| {t['dense'] / t['per']:.3f} | {t['per'] / t['one']:.3f} |"
                    + "".join(f" {t[v]:.1f} ({t['dense'] / t[v]:.3f}) |" for v in variants))
        print(rows[-1], flush=True)
        del fns
        torch.cuda.empty_cache()
    print(f"\n# {torch.cuda.get_device_name()}: 'vs dense' = TFLOPS ratio to the dense GEMM at equal total K "
          "(FP8: one launch's is issue 5's k-grouped criterion, >= 0.85); speed-up = per-group time / one-launch time")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
