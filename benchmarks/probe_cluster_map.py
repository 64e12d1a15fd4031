"""Probe: where the CTAs of a 2-CTA cluster land, for two launch geometries of the same 132 CTAs
(200 KB of shared memory apiece: one CTA per SM, as the GEMMs run):

- 1-D: grid (132, 1, 1), cluster (2, 1, 1) - ours (sm90_bf16_gemm / sm90_fp8_gemm with a cluster);
- 2-D: grid (2, 66, 1), cluster (1, 2, 1) - cuBLAS's nvjet kernels with 1x2 clusters (ncu shows
  `(2, 66, 1)`), whose clusters, by the L2 coalescer's counters, also merge requests with other
  clusters (NOTES.md sessions 20, 26);
- no cluster, grid (132, 1, 1), for reference.

Per launch, each CTA records %smid; printed: how many clusters sit on one TPC (smids 2j, 2j + 1),
and for the 2-D geometry how many (0, y) / (1, y) CTA pairs do (the CTAs adjacent in launch order,
which a tile order could give a shared operand). Three launches each (the map may change).

    python benchmarks/probe_cluster_map.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dg_triton.jit import compiler  # noqa: E402
from dg_triton.jit.module import Kernel  # noqa: E402

SOURCE = r"""
extern "C" __global__ void cluster_map(unsigned* smids) {
    if (threadIdx.x != 0)
        return;
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    smids[blockIdx.x + gridDim.x * blockIdx.y] = id;
}
"""


def launch(kernel, grid, cluster, smids):
    from cuda.bindings import driver
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = 128, 1, 1
    config.sharedMemBytes = 200 * 1024
    config.hStream = torch.cuda.current_stream().cuda_stream
    attributes = []
    if cluster != (1, 1, 1):
        attribute = driver.CUlaunchAttribute()
        attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = cluster
        attributes.append(attribute)
    config.attrs = attributes
    config.numAttrs = len(attributes)
    import ctypes
    pointer = ctypes.c_void_p(smids.data_ptr())
    params = (ctypes.c_void_p * 1)(ctypes.addressof(pointer))
    (err,) = driver.cuLaunchKernelEx(config, kernel.function, ctypes.addressof(params), 0)
    assert int(err) == 0, err
    torch.cuda.synchronize()
    return smids.cpu().tolist()


def main():
    compiled = compiler.compile_kernel("cluster_map", SOURCE, "sm_90a")
    kernel = Kernel(compiled.cubin, "cluster_map", 0, name="cluster_map")
    kernel.allow_dynamic_shared_memory(200 * 1024)
    smids = torch.full((132,), -1, dtype=torch.int32, device="cuda")
    for name, grid, cluster in (("1-D (132,1,1) cluster (2,1,1)", (132, 1, 1), (2, 1, 1)),
                                ("2-D (2,66,1) cluster (1,2,1)", (2, 66, 1), (1, 2, 1)),
                                ("no cluster (132,1,1)", (132, 1, 1), (1, 1, 1))):
        for run in range(3):
            smids.fill_(-1)
            s = launch(kernel, grid, cluster, smids)
            assert min(s) >= 0, f"{name}: a CTA did not run"
            tpc = lambda a, b: s[a] // 2 == s[b] // 2  # noqa: E731
            if grid[1] == 1:   # linear id = x: clusters / pairs are (2c, 2c + 1)
                pairs = [(2 * c, 2 * c + 1) for c in range(66)]
                line = f"consecutive pairs (2c, 2c+1) on one TPC: {sum(tpc(a, b) for a, b in pairs)}/66"
            else:              # linear id = x + 2 y: cluster (x, 2j), (x, 2j + 1); launch pair (0, y), (1, y)
                clusters = [(x + 4 * j, x + 4 * j + 2) for j in range(33) for x in (0, 1)]
                launch_pairs = [(2 * y, 2 * y + 1) for y in range(66)]
                line = (f"clusters on one TPC: {sum(tpc(a, b) for a, b in clusters)}/66; "
                        f"(0,y)/(1,y) pairs on one TPC: {sum(tpc(a, b) for a, b in launch_pairs)}/66")
            print(f"{name} run {run}: {line}; smids by linear id: {s[:16]} ...", flush=True)


if __name__ == "__main__":
    main()
