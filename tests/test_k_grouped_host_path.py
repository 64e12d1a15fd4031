"""The host side of the SM90 k-grouped kernels (dg_triton/kernels/sm90_k_grouped_gemm.py), no GPU
needed: which groups each launch takes, the K blocks it gives them, the configs, and the packed
parameter struct (KGroupedOperands) byte for byte, with stand-in descriptors (distinct 128-byte
patterns where the driver would encode real ones; for BF16 the plan is built by _make_bf16_plan
itself, with the kernel load and the launcher stubbed, and the descriptors' TMA parameters are
checked too). The struct's size is also asserted against the kernels' sizeof at compile time
(the specs' sources, compiled by test_compile_sm90_k_grouped.py); the GPU tests
(test_k_grouped_gpu.py) run it.
"""
import ctypes
import struct

import pytest
import torch

from dg_triton import settings
from dg_triton.kernels import sm90_k_grouped_gemm as kg
from dg_triton.kernels.sm90_k_grouped_gemm import (MAX_GROUPS_PER_LAUNCH, k_block_starts, launch_chunks,
                                                   operands_bytes)
from dg_triton.reference_k_grouped import k_grouped_starts


def test_operands_struct_size_is_three_descriptor_arrays_and_the_starts_padded_to_64_bytes():
    assert operands_bytes(16) == 6272        # 3 * 16 * 128 + 17 * 4 = 6212, padded up
    assert operands_bytes(1) == 448          # 384 + 2 * 4
    assert all(operands_bytes(g) % 64 == 0 and operands_bytes(g) >= 388 * g + 4 for g in range(1, 40))


def test_launches_take_the_non_empty_groups_in_order_at_most_max_groups_each():
    ks = [128, 0, 256, 0, 0, 384, 128]
    starts = k_grouped_starts(ks)
    chunks = launch_chunks(ks, starts, max_groups=2)
    assert chunks == [[(0, 128, 0), (2, 256, 128)], [(5, 384, 384), (6, 128, 768)]]
    assert launch_chunks([0, 0], [0, 0]) == []
    ks = [128] * 37
    chunks = launch_chunks(ks, k_grouped_starts(ks))
    assert [len(c) for c in chunks] == [MAX_GROUPS_PER_LAUNCH, MAX_GROUPS_PER_LAUNCH, 37 - 2 * MAX_GROUPS_PER_LAUNCH]


def test_k_block_starts_give_each_group_its_blocks_among_all_groups():
    ks = [256, 0, 384, 128, 0]
    chunk = launch_chunks(ks, k_grouped_starts(ks))[0]
    starts = k_block_starts(chunk, max_groups=4)
    # Groups 0, 2, 3: blocks [0, 2), [2, 5), [5, 6); the unused slots repeat the end.
    assert starts == [0, 2, 5, 6, 6]
    for j, (_, k, start) in enumerate(chunk):
        assert starts[j] == start // 128 and starts[j + 1] - starts[j] == k // 128
    # A later launch counts from its first group's place among all groups.
    ks = [128] * 3 + [256] * 2
    chunks = launch_chunks(ks, k_grouped_starts(ks), max_groups=3)
    assert k_block_starts(chunks[1], max_groups=3) == [3, 5, 7, 7]


@pytest.mark.parametrize("m,n,ks", [(4096, 7168, [2048] * 16), (7168, 2048, [4096] * 8), (128, 256, [128, 384]),
                                    (1, 136, [256, 0, 128]), (264, 136, [128] * 40)])
def test_config_has_no_split_k_stream_k_or_cluster_and_a_grid_within_the_launch_tiles(m, n, ks):
    groups = min(sum(k > 0 for k in ks), MAX_GROUPS_PER_LAUNCH)
    config = kg.choose_config(m, n, ks, groups, 132)
    assert config.num_splits == 1 and not config.stream_k and config.cluster_size == 1
    tiles = -(-m // config.block_m) * -(-n // config.block_n)
    assert 1 <= config.num_sms <= min(132, tiles * groups)
    assert config.block_m in (64, 128)


class _FakeCache:
    """A DescriptorCache stand-in: a distinct 128-byte pattern per (tag, address)."""

    def __init__(self, tag):
        self.tag, self.buffers = tag, {}

    def __call__(self, address):
        if address not in self.buffers:
            pattern = struct.pack("<QQ", self.tag, address) * 8
            self.buffers[address] = ctypes.create_string_buffer(pattern, 128)
        return ctypes.addressof(self.buffers[address])


def test_packed_struct_holds_each_groups_descriptors_and_k_blocks_in_its_slot():
    m, n = 264, 136
    ks = [128, 0, 384] + [256] * (MAX_GROUPS_PER_LAUNCH + 1)
    starts = k_grouped_starts(ks)
    chunks = launch_chunks(ks, starts)
    spec = kg.KGroupedFp8GemmKernelSpec(kg.choose_config(m, n, ks, MAX_GROUPS_PER_LAUNCH, 132))
    distinct = sorted({k for k in ks if k})
    plan = kg._Plan(spec, None, m, n, chunks, {k: _FakeCache(1000 + k) for k in distinct},
                    {k: _FakeCache(2000 + k) for k in distinct}, _FakeCache(3), (m, n, m * n * 4), 128)
    a, b, d = 0x10000, 0x900000, 0x7000000
    launches = kg._pack(plan, a, b, d)
    assert [count for _, _, count in launches] == [len(c) for c in chunks] == [MAX_GROUPS_PER_LAUNCH, 3]
    size, max_groups = operands_bytes(MAX_GROUPS_PER_LAUNCH), MAX_GROUPS_PER_LAUNCH
    for (buffer, base, count), chunk in zip(launches, chunks):
        assert base % 64 == 0 and ctypes.addressof(buffer) <= base < ctypes.addressof(buffer) + 64
        raw = ctypes.string_at(base, size)
        for j, (g, k, start) in enumerate(chunk):
            for array, (tag, address) in enumerate(((1000 + k, a + m * start), (2000 + k, b + n * start),
                                                    (3, d + g * m * n * 4))):
                offset = (array * max_groups + j) * 128
                assert raw[offset:offset + 16] == struct.pack("<QQ", tag, address), (g, array)
        starts_field = struct.unpack_from(f"<{max_groups + 1}I", raw, 3 * max_groups * 128)
        assert list(starts_field) == k_block_starts(chunk, max_groups)


def test_bf16_k_block_starts_count_blocks_of_64():
    ks = [256, 0, 384, 128]
    chunk = launch_chunks(ks, k_grouped_starts(ks))[0]
    assert k_block_starts(chunk, max_groups=4, block_k=64) == [0, 4, 10, 12, 12]


@pytest.mark.parametrize("out_bytes", [4, 2])
@pytest.mark.parametrize("m,n,ks", [(4096, 7168, [2048] * 16), (7168, 2048, [4096] * 8), (1, 136, [256, 0, 128]),
                                    (264, 136, [128] * 40)])
def test_bf16_config_has_no_split_k_stream_k_or_cluster_and_a_grid_within_the_launch_tiles(m, n, ks, out_bytes):
    groups = min(sum(k > 0 for k in ks), MAX_GROUPS_PER_LAUNCH)
    config = kg.choose_bf16_config(m, n, ks, groups, out_bytes, 132)
    assert config.num_splits == 1 and not config.stream_k and config.cluster_size == 1
    tiles = -(-m // config.block_m) * -(-n // config.block_n)
    assert 1 <= config.num_sms <= min(132, tiles * groups)
    assert config.block_n % 64 == 0, "an MN-major B needs whole 64-column atoms"
    # The benchmark shapes: 128x256 (over the launch's groups the waves even out; NOTES session 26).
    assert m < 4096 or (config.block_m, config.block_n) == (128, 256)


class _RecordingCaches:
    """tma.DescriptorCache stand-in for _make_bf16_plan: each cache is a _FakeCache whose tag is
    its index in `params` (the Tma2dParams it was built with)."""

    def __init__(self):
        self.params = []

    def __call__(self, params):
        self.params.append(params)
        return _FakeCache(len(self.params) - 1)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n", [(264, 136), (1, 136)])
def test_bf16_plan_packs_each_groups_row_range_and_d_slice(monkeypatch, out_dtype, m, n):
    caches = _RecordingCaches()
    monkeypatch.setattr(kg.tma, "DescriptorCache", caches)
    monkeypatch.setattr(kg, "_load_source", lambda *args, **kwargs: None)
    monkeypatch.setattr(kg, "Launcher", lambda *args, **kwargs: None)
    monkeypatch.setattr(settings, "_num_sms", 132)
    ks = [128, 0, 384] + [256] * (MAX_GROUPS_PER_LAUNCH + 1)
    starts = k_grouped_starts(ks)
    plan = kg._make_bf16_plan("test", m, n, ks, starts, out_dtype, 0, None, ())
    out_bytes = out_dtype.itemsize
    assert (plan.spec.a_k_major, plan.spec.b_k_major, plan.spec.out_dtype) == (m == 1, False, out_dtype)
    # A [k, M] row range of a [sum(ks), M] tensor: MN-major (rows of M elements, K the outer
    # coordinate), except a single row (M = 1), which is K-major as in the dense GEMM.
    for k, cache in plan.a_caches.items():
        p = caches.params[cache.tag]
        if m == 1:
            assert (p.inner, p.outer) == (k, 1)
        else:
            assert (p.inner, p.outer, p.row_stride_bytes, p.box_inner) == (m, k, 2 * m, 64)
    for k, cache in plan.b_caches.items():
        p = caches.params[cache.tag]
        assert (p.inner, p.outer, p.row_stride_bytes) == (n, k, 2 * n)
    p = caches.params[plan.tma_d.tag]   # d[g]: [M, N] of d's element, rows N elements apart
    assert (p.element_size, p.inner, p.outer) == (out_bytes, n, m)
    assert m == 1 or p.row_stride_bytes == n * out_bytes
    a, b, d = 0x10000, 0x900000, 0x7000000
    launches = kg._pack(plan, a, b, d)
    assert [count for _, _, count in launches] == [MAX_GROUPS_PER_LAUNCH, 3]
    size, max_groups = operands_bytes(MAX_GROUPS_PER_LAUNCH), MAX_GROUPS_PER_LAUNCH
    for (buffer, base, count), chunk in zip(launches, plan.chunks):
        raw = ctypes.string_at(base, size)
        for j, (g, k, start) in enumerate(chunk):
            expected = ((plan.a_caches[k].tag, a + 2 * m * start), (plan.b_caches[k].tag, b + 2 * n * start),
                        (plan.tma_d.tag, d + g * m * n * out_bytes))
            for array, (tag, address) in enumerate(expected):
                offset = (array * max_groups + j) * 128
                assert raw[offset:offset + 16] == struct.pack("<QQ", tag, address), (g, array)
        starts_field = struct.unpack_from(f"<{max_groups + 1}I", raw, 3 * max_groups * 128)
        assert list(starts_field) == k_block_starts(chunk, max_groups, block_k=64)


def test_bf16_plan_refuses_a_k_that_is_not_whole_blocks(monkeypatch):
    monkeypatch.setattr(settings, "_num_sms", 132)
    with pytest.raises(ValueError, match="multiple of 64"):
        kg._make_bf16_plan("test", 128, 128, [128, 96], [0, 128], torch.float32, 0, None, ())
