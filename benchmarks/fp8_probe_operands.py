"""The FP8 1D2D operands the probes time (probe_fp8_256.py, probe_fp8_clusters.py,
probe_fp8_tiles.py, probe_l2_group.py): random BF16 A [M, K] and B [N, K] cast as the API's users
cast them (1x128 per-token A scales, TMA-aligned; 128x128 block B scales), their FP32 reference
product, a BF16 D, the validated kernel problem, and cuBLAS block-wise `torch._scaled_mm` on the
same data (A scales handed over in the layout it reads)."""
from typing import NamedTuple

import torch

import dg_triton
from dg_triton.kernels import sm90_fp8_gemm


class Fp8Operands(NamedTuple):
    a_q: torch.Tensor
    sfa: torch.Tensor
    b_q: torch.Tensor
    sfb: torch.Tensor
    d: torch.Tensor
    ref: torch.Tensor
    problem: sm90_fp8_gemm.Fp8GemmProblem

    def run(self, config, compiled_dims="", defines=()):
        """One launch of the SM90 kernel with a forced config into d."""
        sm90_fp8_gemm.run("probe", self.a_q, self.sfa, self.b_q, self.sfb, self.d, self.problem,
                          False, compiled_dims, config, defines)

    def cublas_blockwise(self):
        """A call of cuBLAS block-wise `torch._scaled_mm` on the same data (a fresh output)."""
        scale_a, scale_b = self.sfa.t().contiguous().t(), self.sfb.t()
        return lambda: torch._scaled_mm(self.a_q, self.b_q.t(), scale_a, scale_b, out_dtype=torch.bfloat16)


def fp8_1d2d_operands(m: int, n: int, k: int) -> Fp8Operands:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_q, sfa = dg_triton.per_token_cast_to_fp8(a, False, tma_aligned_sf=True)
    b_q, sfb = dg_triton.per_block_cast_to_fp8(b, False)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    layout = (d.dtype, a_q.stride(), b_q.stride(), d.stride(), sfa.stride(), sfb.stride())
    problem = sm90_fp8_gemm.Fp8GemmProblem(m, n, k, "1d2d", d.device.index, None, layout)
    return Fp8Operands(a_q, sfa, b_q, sfb, d, a.float() @ b.float().T, problem)
