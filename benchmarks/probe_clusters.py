"""Why are the 2-CTA cluster kernels slow? Asks the driver how many clusters of the kernel can be
resident at once (cuOccupancyMaxActiveClusters) and times the kernel with the grid capped to that.

    python benchmarks/probe_clusters.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dg_triton import testing, validation  # noqa: E402
from dg_triton.heuristics.sm90 import make_config  # noqa: E402
from dg_triton.jit.module import _driver  # noqa: E402
from dg_triton.kernels import sm90_bf16_gemm  # noqa: E402


def max_active_clusters(plan) -> int:
    driver = _driver()
    launcher = plan.launcher
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = launcher._config.gridDimX, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = launcher._config.blockDimX, 1, 1
    config.sharedMemBytes = launcher._config.sharedMemBytes
    attribute = driver.CUlaunchAttribute()
    attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = 2, 1, 1
    config.attrs = [attribute]
    config.numAttrs = 1
    err, count = driver.cuOccupancyMaxActiveClusters(launcher.kernel.function, config)
    return count if int(err) == 0 else -int(err)


def main():
    m, n, k = 4096, 4096, 7168
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    ref = a.float() @ b.float().T
    problem = validation.bf16_gemm("probe", a, b, d, None)
    for block_m, block_n in ((128, 256), (128, 128), (64, 64)):
        for cluster_n, grid in ((1, 132), (2, 132), (2, 64), (2, 32)):
            config = make_config(m, n, block_m, block_n, 1, k, 2, grid, cluster_n)
            run = lambda: sm90_bf16_gemm.run("probe", a, b, d, problem[:7], problem[7], False, "", config)  # noqa: E731
            d.fill_(float("nan"))
            run()
            diff = float(testing.calc_diff(d.float(), ref))
            plan = next(p for key, p in sm90_bf16_gemm._plans.items() if key[4] == config)
            active = max_active_clusters(plan) if cluster_n == 2 else "-"
            us = testing.bench_graph(run, warmup_ms=5, rep_ms=30)
            print(f"{block_m}x{block_n} cluster {cluster_n} grid {config.num_sms}: {us:8.1f} us "
                  f"(max active clusters {active}, calc_diff {diff:.1e})", flush=True)


if __name__ == "__main__":
    main()
