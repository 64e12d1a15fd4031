"""dg_triton: DeepGEMM-compatible tensor-core kernels (Triton front, JIT-compiled CUDA back).

Importing is cheap: no CUDA call, no compilation. Kernels compile on first use (see README).
Built so far (all run and tested on an H200, README): the SM90 BF16 and FP8 dense GEMMs (FP8 1D2D,
1D1D, skip-head-mid), the SM90 M-grouped BF16 and FP8 GEMMs (contiguous and masked), the Triton
prologue kernels (FP8/FP4 casts, scale-factor layouts, fused SwiGLU + FP8 quant, MoE token layouts)
that run on any CUDA GPU and fall back to plain torch on other devices, and portable Triton GEMMs
(dense BF16 and FP8, M-grouped BF16) for every other CUDA GPU and, under TRITON_INTERPRET=1, for
CPU tensors (dispatch.py), and the K-grouped GEMMs (k_grouped.py: one dense-kernel launch per group,
on the SM90 and the portable path). No SM100 CUDA kernel yet.
"""
__version__ = "2.6.1"

from dg_triton import testing, utils
from dg_triton.errors import DGArgumentError
from dg_triton.fp8_gemm import (fp8_fp4_gemm_nn, fp8_fp4_gemm_nt, fp8_fp4_gemm_tn, fp8_fp4_gemm_tt,
                                fp8_gemm_nn, fp8_gemm_nt, fp8_gemm_nt_skip_head_mid, fp8_gemm_tn,
                                fp8_gemm_tt)
from dg_triton.grouped import (m_grouped_bf16_gemm_nn_contiguous, m_grouped_bf16_gemm_nt_contiguous,
                              m_grouped_bf16_gemm_nt_masked)

from dg_triton.grouped_fp8 import (fp8_m_grouped_gemm_nt_masked, m_grouped_fp8_fp4_gemm_nn_contiguous,
                                   m_grouped_fp8_fp4_gemm_nt_contiguous, m_grouped_fp8_fp4_gemm_nt_masked,
                                   m_grouped_fp8_gemm_nn_contiguous, m_grouped_fp8_gemm_nt_contiguous,
                                   m_grouped_fp8_gemm_nt_masked)
from dg_triton.gemm import bf16_gemm_nn, bf16_gemm_nt, bf16_gemm_tn, bf16_gemm_tt
from dg_triton.k_grouped import (k_grouped_bf16_gemm_tn_contiguous, k_grouped_fp8_gemm_nt_contiguous,
                                 k_grouped_fp8_gemm_tn_contiguous)
from dg_triton.moe_layout import moe_permute_contiguous, moe_permute_masked, moe_unpermute_combine
from dg_triton.settings import (get_block_size_multiple_of, get_deterministic_algorithms,
                                get_ignore_compile_dims, get_num_sms, get_pdl, get_tc_util,
                                set_block_size_multiple_of, set_ignore_compile_dims, set_num_sms,
                                set_pdl, set_tc_util, use_deterministic_algorithms)
from dg_triton.activation import swiglu, swiglu_per_token_cast_to_fp8
from dg_triton.utils import *  # noqa: F401,F403  (ceil_div, align, layout helpers: API.md 3)

# DeepGEMM's legacy name (API.md), the same callable.
bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked
