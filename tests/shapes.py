"""Problem shapes of the GPU tests, kept in one place (STYLE.md "Tests").

The dense lists copy API.md section 8 (the upstream DeepGEMM test generators); the edge and tail
lists are ours. Every GPU test takes its shapes from here. Sizes are (M, N, K) of the logical
problem D[M, N] = C + A[M, K] @ B[N, K].T, whatever alias passes the tensors.
"""

# --- Dense BF16 GEMM (API.md 8 "Dense") ----------------------------------------------------------

# Forward M: decode (1 token), one 128-row block, prefill (4096 tokens).
BF16_DENSE_FORWARD_M = [1, 128, 4096]

# Forward (N, K) with a bf16 D: the DeepSeek-V3 projection weights.
BF16_DENSE_BF16_OUT_NK = [
    (2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048),
]

# Forward (N, K) with an fp32 D: the MoE router (256 experts) and the LM head (vocabulary 129280).
BF16_DENSE_FP32_OUT_NK = [(256, 7168), (129280, 7168)]

# (N, K) whose M=4096 runs are costly (the LM head: an fp32 D of 2 GiB, a 7.6 TFLOP reference in
# FP32): the GPU tests run M=4096 on these once, in the forward `nt` test only.
BF16_DENSE_LARGE_NK = [(129280, 7168)]

# Backward shapes derive from every forward (N, K) (BF16 adds the fp32-out pairs to the loop) with
# the tokens of the forward pass as M.
BF16_DENSE_BACKWARD_NK = BF16_DENSE_BF16_OUT_NK + BF16_DENSE_FP32_OUT_NK
BF16_DENSE_BACKWARD_M = 4096

# dgrad (M=4096, N=k, K=n): bf16 D, A K-major, B MN-major -> alias `nn`.
BF16_DENSE_DGRAD_MNK = [(BF16_DENSE_BACKWARD_M, k, n) for n, k in BF16_DENSE_BACKWARD_NK]

# wgrad (M=n, N=4096, K=k) as API.md 8 lists it: A and B MN-major -> alias `tn`; run twice, fp32 D
# accumulated into (c is d) and bf16 D without c.
BF16_DENSE_WGRAD_MNK = [(n, BF16_DENSE_BACKWARD_M, k) for n, k in BF16_DENSE_BACKWARD_NK]

# --- Edges and tails (ours) ----------------------------------------------------------------------

# Edge M: one row (a size-1 dim, exempt from the 16-byte stride rule), fewer rows than any tile,
# one row past a 128-row block. MN-major A of M=7/129 needs a padded row stride (tests pad to 8).
BF16_DENSE_EDGE_M = [1, 7, 129]

# (N, K) used with the edge M values: several N and K blocks, cheap.
BF16_DENSE_EDGE_NK = (2112, 7168)

# N tails: multiples of 8 (a bf16 D row stays a 16-byte multiple, the TMA rule) but not of 16, so
# the last N block is partial and its store must be clipped.
BF16_DENSE_TAIL_N = [8, 24, 584, 2120]

# K tails, same rule for K-major rows: the last K block is partial and must read as zeros.
BF16_DENSE_TAIL_K = [8, 136, 7176]

# (M, K) used with the N tails and (M, N) used with the K tails.
BF16_DENSE_TAIL_N_MK = (128, 1536)
BF16_DENSE_TAIL_K_MN = (128, 2112)

# --- Dense FP8 GEMM (API.md 8 "Dense", issue 4) ---------------------------------------------------

# Forward: the BF16 forward (N, K) pairs with a bf16 D, 1D2D recipe (1, 128, 128), plus M=64.
FP8_DENSE_FORWARD_M = [1, 64, 128, 4096]
FP8_DENSE_NK = BF16_DENSE_BF16_OUT_NK
# dgrad (M=4096, N=k, K=n), bf16 D, 1D2D; on SM90 both operands K-major (the `nt` alias).
FP8_DENSE_DGRAD_MNK = [(BF16_DENSE_BACKWARD_M, k, n) for n, k in FP8_DENSE_NK]
# wgrad (M=n, N=4096, K=k), fp32 D accumulated into (c is d), 1D1D recipe (1, 1, 128), K-major.
FP8_DENSE_WGRAD_MNK = [(n, BF16_DENSE_BACKWARD_M, k) for n, k in FP8_DENSE_NK]
# M tails of issue 4: one row, fewer rows than a tile, one past a 128-row block and a 4096 one.
FP8_DENSE_TAIL_M = [1, 7, 129, 4097]
# fp8_gemm_nt_skip_head_mid (API.md 3.3): upstream's head split (left, mid, right) and two sizes.
FP8_SKIP_HEAD_MID_SPLITS = (128, 64, 128)
FP8_SKIP_HEAD_MID_MNK = [(128, 4096, 7168), (4096, 4096, 7168)]

# --- M-grouped BF16 GEMM (API.md 8 "m-grouped contiguous", "masked"; issue 5) -------------------

# (N, K) of every grouped list: DeepSeek-V3 MoE up/gate (6144, 7168) and down (7168, 3072)
# projections, and two smaller experts.
GROUPED_NK = [(6144, 7168), (7168, 3072), (4096, 4096), (4096, 2048)]
# Contiguous: (groups, expected rows per group); per-group m = int(expected * U(0.7, 1.3)).
GROUPED_CONTIGUOUS_GM = [(4, 8192), (8, 4096)]
# Masked: max_m 4096, (groups, expected rows per group); masked_m = int(expected * U(0.7, 1.3)),
# called with expected_m = int(expected * 1.2).
GROUPED_MASKED_MAX_M = 4096
GROUPED_MASKED_GM = [(32, 192), (6, 1024), (32, 20), (6, 20)]
# The GPU tests divide the contiguous expected m by this (a run in about a second each); the
# benchmark runs the full sizes.
GROUPED_GPU_TEST_M_DIVISOR = 4

# --- End-to-end MoE forward (issue 5; tests/moe_forward.py) ------------------------------------

# DeepSeek-V3's routed experts: (tokens, hidden, intermediate, experts, top-k); the benchmark's
# shape and the GPU test's one full-size case.
MOE_FORWARD_DEEPSEEK_V3 = (4096, 7168, 2048, 256, 8)
# Smaller (tokens, hidden, intermediate, experts) for the routing-pattern cases, each run with
# every top-k of MOE_FORWARD_TOPK: one with DeepSeek-V3's expert width and a token count that is
# no multiple of anything.
MOE_FORWARD_SHAPES = [(512, 2048, 512, 16), (1000, 7168, 2048, 32)]
MOE_FORWARD_TOPK = [1, 8]

# --- K-grouped GEMMs (API.md 8 "k-grouped"; issue 5) --------------------------------------------

# (groups, M, N, expected K per group) as upstream's tests list them: [M, N] is one expert's weight
# gradient, K the tokens routed to that expert.
K_GROUPED_GMNK = [(4, 4096, 7168, 8192), (4, 7168, 2048, 8192), (8, 4096, 7168, 4096),
                  (8, 7168, 2048, 4096), (16, 4096, 7168, 2048), (16, 7168, 2048, 2048)]
# Per-group k = max(1, int(expected * U(0.7, 1.3))) aligned up to this (SM90: FP8 and BF16 128).
K_GROUPED_SM90_K_ALIGNMENT = 128
