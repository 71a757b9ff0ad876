"""What the rest of the pool holds beside an engine process, and what is free: the one figure the engines'
comparisons (vLLM's, llama.cpp's, SGLang's, Ollama's) draw as "other", from the GB10's recorded state (NVML's
memory fields "Not Supported": the OS says) and two H100 ranks (NVML says)."""

from __future__ import annotations

from dataclasses import replace

from tests.tui.fixed_states import gb10_state, two_rank_state
from tui.screens.live_buckets import other_and_free, pools
from tui.screens.vllm_view import _other_beside

GIB = 2**30


def _pool(state, unified: bool):
    return next(p for p in pools(state) if p.unified == unified)


def test_a_unified_pool_is_what_the_os_sees_beside_the_engine():
    state = gb10_state()
    pool = _pool(state, True)
    used = state.os.mem_total - state.os.mem_available
    assert other_and_free(state, pool, 10 * GIB) == (used - 10 * GIB, state.os.mem_available)
    assert other_and_free(state, pool, used + GIB) == (0, state.os.mem_available)  # never below nothing
    assert _other_beside(state, pool, 10 * GIB, 123) == used - 10 * GIB


def test_a_unified_pool_without_a_meminfo_sample_says_nothing_and_vllm_keeps_its_own_figure():
    state = replace(gb10_state(), os=None)
    pool = _pool(gb10_state(), True)
    assert other_and_free(state, pool, 10 * GIB) == (None, None)
    assert _other_beside(state, pool, 10 * GIB, 123) == 123


def test_a_gpu_is_what_nvml_sees_beside_the_engine():
    state = two_rank_state()
    pool = _pool(state, False)
    device = next(d for d in state.nvml.devices if d.index == pool.index)
    assert other_and_free(state, pool, GIB) == (device.used - GIB, device.free)
    assert _other_beside(state, pool, GIB, 123) == device.used - GIB


def test_a_gpu_whose_used_memory_is_not_supported_says_nothing():
    state = two_rank_state()
    pool = _pool(state, False)
    devices = tuple(replace(d, used=None) for d in state.nvml.devices)
    state = replace(state, nvml=replace(state.nvml, devices=devices))
    assert other_and_free(state, pool, GIB) == (None, None)
    assert _other_beside(state, pool, GIB, 123) is None
