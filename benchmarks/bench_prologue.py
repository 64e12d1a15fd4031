"""Benchmark of the Triton prologue/epilogue kernels (issue 3): FP8/FP4 casts, scale-factor
layouts, fused SwiGLU + FP8 quant, MoE token permutation and combine.

Per kernel, at DeepSeek-V3 sizes: our median time and GB/s (bytes read + written once), a
device-to-device copy of the same number of bytes timed in the same run, and the plain torch
composite that computes the same thing (the reference_* modules, which follow DeepGEMM's torch
helpers step for step). Ours is replayed from a CUDA graph (testing.bench_graph);
the torch composites may sync the host (their asserts), so they are timed per call with CUDA
events after a long kernel that lets the CPU queue ahead (testing.bench, high_precision). So is
the copy: captured in a graph, ``copy_`` becomes a copy-engine memcpy node, about a third slower
on the H200 than the copy kernel eager mode runs, which would flatter us. Every case is checked
against its reference before it is timed.

Each of the three is also given as device time (testing.device_us_per_call: the CUPTI durations
of the call's kernels and memcpys, L2 flushed before each call). The SF-layout kernels move 1-9 MB
in 1-3 us, so a graph replay's ~4 us launch cost, absent inside a captured model, would otherwise
be most of what the replay column measures; the device columns compare the work itself.

    python benchmarks/bench_prologue.py
"""
import argparse
import datetime
import functools
import json
import sys
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import dg_triton  # noqa: E402
from bench_gemm import versions  # noqa: E402
from dg_triton import (activation, moe_layout, reference_moe_layout,  # noqa: E402
                       reference_quant, reference_sf_layout, reference_swiglu, testing)

ACTIVATIONS = ((4096, 7168), (16384, 7168))
WEIGHTS = ((7168, 2048), (24576, 1536))
SWIGLU = (8192, 2048)                 # [M, 2 * I] in, I = 2048
MOE = (8192, 8, 256, 7168)            # tokens, top-k, experts, hidden


def nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def same(label, ours, ref, exact=True):
    """Every tensor of two results (tuples or namedtuples; None fields skipped) agrees.

    exact: bitwise. Otherwise (casts checked against the torch composite on the GPU, where torch
    divides by a scalar as a multiply by its reciprocal, so a scale may differ by an ulp; the GPU
    tests check the casts bitwise against CPU references): FP8 codes and packed exponents at most
    one step apart (a scale an ulp off can move every code of its group), floats to 1e-6 relative.
    """
    ours = ours if isinstance(ours, (tuple, list)) else (ours,)
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    for i, (x, y) in enumerate(zip(ours, ref)):
        if x is None and y is None:
            continue
        tag = f"{label}[{i}]"
        assert x.shape == y.shape, f"{tag}: shape {tuple(x.shape)} vs {tuple(y.shape)}"
        if exact:
            testing.assert_bitwise_equal(x.contiguous(), y.contiguous(), tag)
        elif x.dtype in (torch.float32, torch.bfloat16):
            assert torch.allclose(x.float(), y.float(), rtol=1e-6, atol=0, equal_nan=True), tag
        else:
            bits = lambda t: t.contiguous().view(torch.uint8).int()  # noqa: E731
            step = (bits(x) - bits(y)).abs()
            assert int(step.max()) <= 1, tag


# Cases whose check failed (not timed) or whose group raised: the run goes on and exits 1.
FAILURES = []


def case_rows(rows, table, name, shape, ours_fn, eager_fn, moved_bytes, check):
    """Times one kernel, the copy of the same bytes and the torch composite; appends the rows.
    A failed check is recorded and the case is not timed."""
    try:
        check()
    except AssertionError as error:
        FAILURES.append(f"{name} {shape}: check FAILED: {error}")
        print(FAILURES[-1], flush=True)
        return
    ours_us = testing.bench_graph(ours_fn)
    src = torch.empty(moved_bytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_us = testing.bench(functools.partial(dst.copy_, src), num_warmups=3, num_tests=20,
                            high_precision=True) * 1e6
    eager_us = testing.bench(eager_fn, num_warmups=3, num_tests=10, high_precision=True) * 1e6
    ours_dev = testing.device_us_per_call(ours_fn)[0]
    copy_dev = testing.device_us_per_call(functools.partial(dst.copy_, src))[0]
    eager_dev = testing.device_us_per_call(eager_fn, num_tests=10)[0]
    gbps = moved_bytes / ours_us / 1e3
    rows.append({"name": name, "shape": shape,
                 "ours": {"us": round(ours_us, 2), "tflops": None, "gbps": round(gbps, 1),
                          "device_us": round(ours_dev, 2)},
                 "baselines": {"copy": {"us": round(copy_us, 2), "gbps": round(moved_bytes / copy_us / 1e3, 1),
                                        "device_us": round(copy_dev, 2)},
                               "torch_eager": {"us": round(eager_us, 2),
                                               "gbps": round(moved_bytes / eager_us / 1e3, 1),
                                               "device_us": round(eager_dev, 2)}}})
    table.append((name, "x".join(str(v) for v in shape.values()), ours_us, gbps, copy_us, eager_us,
                  ours_dev, copy_dev, eager_dev))
    print(f"{name} {shape}: ours {ours_us:.1f} us ({gbps:.0f} GB/s), copy {copy_us:.1f} us, "
          f"eager {eager_us:.1f} us; device time: ours {ours_dev:.1f}, copy {copy_dev:.1f}, "
          f"eager {eager_dev:.1f} us", flush=True)
    del src, dst


def casts(rows, table):
    for m, k in ACTIVATIONS:
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        for ue8m0 in (False, True):
            ours = functools.partial(dg_triton.per_token_cast_to_fp8, x, ue8m0, tma_aligned_sf=True)
            eager = functools.partial(reference_quant.per_token_cast_to_fp8, x, ue8m0)
            q, sf = ours()
            case_rows(rows, table, f"per_token_cast_to_fp8{'_ue8m0' if ue8m0 else ''}", {"m": m, "k": k},
                      ours, eager, nbytes(x, q, sf), lambda: same("per_token", ours(), eager(), exact=False))
        ours = functools.partial(dg_triton.per_token_cast_to_fp4, x, True, 32, True)
        eager = functools.partial(reference_quant.per_token_cast_to_fp4, x, True, 32, True)
        q, sf = ours()
        case_rows(rows, table, "per_token_cast_to_fp4_packed_ue8m0", {"m": m, "k": k}, ours, eager,
                  nbytes(x, q, sf), lambda: same("fp4", ours(), eager(), exact=False))
        ours = functools.partial(dg_triton.transpose_packed_fp4, q)
        eager = functools.partial(reference_quant.transpose_packed_fp4, q)
        case_rows(rows, table, "transpose_packed_fp4", {"m": m, "k": k}, ours, eager, 2 * nbytes(q),
                  lambda: same("transpose_fp4", ours(), eager()))
        # Per-channel: wgrad operands [K, MN] with 128 K rows per scale.
        ours = functools.partial(dg_triton.per_channel_cast_to_fp8, x, False)
        eager = functools.partial(reference_quant.per_channel_cast_to_fp8, x, False)
        q, sf = ours()
        case_rows(rows, table, "per_channel_cast_to_fp8", {"m": m, "k": k}, ours, eager,
                  nbytes(x, q, sf), lambda: same("per_channel", ours(), eager(), exact=False))
        del x, q, sf
    for n, k in WEIGHTS:
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        ours = functools.partial(dg_triton.per_block_cast_to_fp8, w, False)
        eager = functools.partial(reference_quant.per_block_cast_to_fp8, w, False)
        q, sf = ours()
        case_rows(rows, table, "per_block_cast_to_fp8", {"n": n, "k": k}, ours, eager,
                  nbytes(w, q, sf), lambda: same("per_block", ours(), eager(), exact=False))
        del w, q, sf


def sf_layouts(rows, table):
    for m, k in ACTIVATIONS:
        groups = k // 128
        sf = torch.rand(m, groups, device="cuda") + 0.5
        ours = functools.partial(dg_triton.get_mn_major_tma_aligned_tensor, sf)
        eager = functools.partial(reference_sf_layout.get_mn_major_tma_aligned_tensor, sf)
        case_rows(rows, table, "get_mn_major_tma_aligned_tensor", {"mn": m, "sf_k": groups}, ours, eager,
                  2 * nbytes(sf), lambda: same("mn_major", ours(), eager()))
        pow2 = reference_quant.ceil_to_ue8m0(sf)
        ours = functools.partial(dg_triton.get_mn_major_tma_aligned_packed_ue8m0_tensor, pow2)
        eager = functools.partial(reference_sf_layout.get_mn_major_tma_aligned_packed_ue8m0_tensor, pow2)
        case_rows(rows, table, "get_mn_major_tma_aligned_packed_ue8m0_tensor", {"mn": m, "sf_k": groups},
                  ours, eager, nbytes(pow2) * 5 // 4, lambda: same("packed", ours(), eager()))
        del sf, pow2
    # k-grouped wgrad SFs: 8 experts with 4096 K rows each, MN = 7168.
    mn, num_groups, k_per_group = 7168, 8, 4096
    ks = [k_per_group] * num_groups
    sf = reference_quant.ceil_to_ue8m0(torch.rand(num_groups * k_per_group // 128, mn, device="cuda") + 0.5)
    grouped_layout = torch.tensor(ks, dtype=torch.int32, device="cuda")
    ours = functools.partial(dg_triton.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor, sf,
                             grouped_layout, ks, 128, 128)
    eager = functools.partial(reference_sf_layout.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor, sf,
                              grouped_layout, ks, 128, 128)
    case_rows(rows, table, "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor",
              {"mn": mn, "groups": num_groups, "k_per_group": k_per_group}, ours, eager,
              nbytes(sf) * 5 // 4, lambda: same("k_grouped", ours(), eager()))


def swiglu_cases(rows, table):
    m, inter = SWIGLU
    x = torch.randn(m, 2 * inter, dtype=torch.bfloat16, device="cuda")
    weights = torch.rand(m, device="cuda")
    fused = functools.partial(activation.swiglu_per_token_cast_to_fp8, x, routing_weights=weights)
    eager = functools.partial(reference_swiglu.swiglu_per_token_cast_to_fp8, x, False,
                              routing_weights=weights)
    q, sf = fused()
    case_rows(rows, table, "swiglu_per_token_cast_to_fp8", {"m": m, "i": inter}, fused, eager,
              nbytes(x, weights, q, sf), lambda: same("swiglu", fused(), eager(), exact=False))
    unfused = lambda: dg_triton.per_token_cast_to_fp8(activation.swiglu(x, routing_weights=weights),  # noqa: E731
                                                      False, tma_aligned_sf=True)
    if not rows or rows[-1]["name"] != "swiglu_per_token_cast_to_fp8":
        return  # the fused check failed (recorded): nothing to compare
    fused_us = rows[-1]["ours"]["us"]
    unfused_us = testing.bench_graph(unfused)
    unfused_dev = testing.device_us_per_call(unfused)[0]
    rows[-1]["baselines"]["ours_unfused"] = {"us": round(unfused_us, 2), "device_us": round(unfused_dev, 2),
                                             "note": "swiglu() then per_token_cast_to_fp8(), our two kernels"}
    print(f"swiglu fused {fused_us:.1f} us vs unfused (our two kernels) {unfused_us:.1f} us; device time "
          f"{rows[-1]['ours']['device_us']:.1f} vs {unfused_dev:.1f} us", flush=True)
    table.append(("  unfused: swiglu + per_token_cast", f"{m}x{inter}", unfused_us, None, None, None,
                  unfused_dev, None, None))


def moe_cases(rows, table):
    tokens, topk, experts, hidden = MOE
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda")
    # Random routing: each token picks topk distinct experts.
    topk_ids = torch.rand(tokens, experts, device="cuda").argsort(dim=1)[:, :topk].to(torch.int32)
    topk_weights = torch.rand(tokens, topk, device="cuda")
    shape = {"tokens": tokens, "topk": topk, "experts": experts, "hidden": hidden}
    for quantize in (False, True):
        ours = functools.partial(moe_layout.moe_permute_contiguous, x, topk_ids, experts, quantize=quantize)
        eager = functools.partial(reference_moe_layout.moe_permute_contiguous, x, topk_ids, experts,
                                  alignment=dg_triton.get_mk_alignment_for_contiguous_layout(),
                                  quantize=quantize)
        result = ours()
        written = [t for t in result if isinstance(t, torch.Tensor)]
        case_rows(rows, table, f"moe_permute_contiguous{'_fp8' if quantize else ''}", shape, ours, eager,
                  nbytes(x, topk_ids, *written),
                  functools.partial(lambda q: same("permute", ours(), eager(), exact=not q), quantize))
    # Masked layout (decode): room for twice the mean load per expert.
    max_m = 2 * tokens * topk // experts
    ours = functools.partial(moe_layout.moe_permute_masked, x, topk_ids, experts, max_m)
    eager = functools.partial(reference_moe_layout.moe_permute_masked, x, topk_ids, experts, max_m)
    written = [t for t in ours() if isinstance(t, torch.Tensor)]
    case_rows(rows, table, "moe_permute_masked", dict(shape, max_m=max_m), ours, eager,
              nbytes(x, topk_ids, *written), lambda: same("masked", ours(), eager()))
    result = moe_layout.moe_permute_contiguous(x, topk_ids, experts)
    y = torch.randn(result.permuted.shape, dtype=torch.bfloat16, device="cuda")
    ours = functools.partial(moe_layout.moe_unpermute_combine, y, result.row_of_slot, topk_weights)
    eager = functools.partial(reference_moe_layout.moe_unpermute_combine, y, result.row_of_slot, topk_weights)
    out = ours()
    moved = tokens * topk * hidden * 2 + nbytes(result.row_of_slot, topk_weights, out)
    case_rows(rows, table, "moe_unpermute_combine", shape, ours, eager, moved,
              lambda: same("combine", ours(), eager()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_prologue: no CUDA device; nothing to time")
        return 0
    rows, table = [], []
    for group in (casts, sf_layouts, swiglu_cases, moe_cases):
        try:
            group(rows, table)
        except Exception as error:  # report and go on: one broken group must not lose the others
            traceback.print_exc()
            FAILURES.append(f"{group.__name__}: {type(error).__name__}: {error}")
    gpu = torch.cuda.get_device_name()
    lines = [f"# prologue kernels on {gpu}, {datetime.date.today()}", "",
             f"versions: {json.dumps(versions())}", f"command: python {' '.join(sys.argv)}", "",
             "us: ours graph-replayed, copy and eager per call with CUDA events (see the docstring); "
             "dev: device time of the call's kernels (testing.device_us_per_call). vs: their time / ours.", "",
             "| kernel | shape | ours us | ours GB/s | copy us | vs copy | torch eager us | vs eager "
             "| ours dev | copy dev | vs copy dev | eager dev | vs eager dev |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(value, digits):
        return "-" if value is None else f"{value:.{digits}f}"

    for name, shape, us, gbps, copy_us, eager_us, ours_dev, copy_dev, eager_dev in table:
        ratio = lambda base, own: base and base / own  # noqa: E731
        lines.append(f"| {name} | {shape} | {us:.1f} | {cell(gbps, 0)} | {cell(copy_us, 1)} | "
                     f"{cell(ratio(copy_us, us), 2)} | {cell(eager_us, 1)} | {cell(ratio(eager_us, us), 1)} | "
                     f"{cell(ours_dev, 1)} | {cell(copy_dev, 1)} | {cell(ratio(copy_dev, ours_dev), 2)} | "
                     f"{cell(eager_dev, 1)} | {cell(ratio(eager_dev, ours_dev), 1)} |")
    lines += [""] + [f"FAILED: {failure}" for failure in FAILURES]
    print("\n".join(lines))
    if not args.no_write:
        results = ROOT / "benchmarks" / "results"
        (results / "prologue-h200.md").write_text("\n".join(lines) + "\n")
        (results / "prologue-h200.json").write_text(json.dumps(
            {"family": "prologue", "gpu": gpu, "date": str(datetime.date.today()), "versions": versions(),
             "command": f"python {' '.join(sys.argv)}", "rows": rows}, indent=1) + "\n")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
