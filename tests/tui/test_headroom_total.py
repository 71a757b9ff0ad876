"""The headroom gauge's total is the one that belongs to the free figure collectors/state.py headroom_of
chose: host MemTotal for MemAvailable, that device's total for NVML's device free, the agent's cuda_total for
its mem_get_info (no NVML). The state carries it (MonitorState.headroom_total_bytes); the gauge
(tui/screens/live_buckets.py headroom) reads it and finds nothing again."""

from __future__ import annotations

from dataclasses import replace

from collectors.alert_options import AlertOptions
from collectors.snapshots import MonitorState, NVMLSnapshot
from collectors.state import StateBuilder, headroom_of
from tests.tui.fixed_states import (
    GIB,
    H100_TOTAL,
    MEM_AVAILABLE,
    MEM_TOTAL,
    bare_state,
    gb10_state,
    two_rank_state,
)
from tui.screens.live_buckets import headroom

NO_NVML = NVMLSnapshot(status="no NVML library: libnvidia-ml.so.1 not found", available=False, devices=())


def gauge(state: MonitorState, *, unified: bool) -> tuple[int | None, int | None, str]:
    """headroom_of's (free, total, source) put in the state, and the gauge drawn from that state."""
    free, total, source = headroom_of(state.os, state.nvml, state.agents, unified)
    state = replace(state, headroom_bytes=free, headroom_total_bytes=total, headroom_source=source)
    data = headroom(state, AlertOptions())
    assert (data.headroom_bytes, data.source) == (free, source)
    return free, data.total_bytes, source


def test_mem_available_is_out_of_host_mem_total():
    assert gauge(gb10_state(), unified=True) == (MEM_AVAILABLE, MEM_TOTAL, "MemAvailable")
    # no GPU at all: host memory is the only pool
    assert gauge(bare_state(), unified=False) == (11 * GIB, 16 * GIB, "MemAvailable")


def test_nvml_device_free_is_out_of_that_devices_total():
    state = two_rank_state()
    # rank 1 holds more (the tightest device); rank 0 is a bigger card: its total is not the gauge's
    gpu0, gpu1 = state.nvml.devices
    gpu0 = replace(gpu0, total=141 * GIB, free=141 * GIB - gpu0.used)
    state = replace(state, nvml=replace(state.nvml, devices=(gpu0, gpu1)))
    assert gpu1.free < gpu0.free
    assert gauge(state, unified=False) == (gpu1.free, H100_TOTAL, "device free (NVML)")


def test_agent_device_free_is_out_of_the_agents_cuda_total():
    state = two_rank_state()
    figures = ((30 * GIB, H100_TOTAL), (20 * GIB, 48 * GIB))  # (cuda_free, cuda_total) per rank
    agents = tuple(
        replace(view, latest=(replace(view.latest[0], cuda_free=free, cuda_total=total),))
        for view, (free, total) in zip(state.agents, figures, strict=True)
    )
    state = replace(state, nvml=NO_NVML, agents=agents)
    assert gauge(state, unified=False) == (20 * GIB, 48 * GIB, "device free (agent)")


def test_unknown_headroom_has_no_total():
    state = two_rank_state()  # devices listed, none saying its free memory, no agent's mem_get_info
    devices = tuple(replace(d, free=None) for d in state.nvml.devices)
    state = replace(state, nvml=replace(state.nvml, devices=devices))
    assert gauge(state, unified=False) == (None, None, "unknown")


def test_the_built_state_carries_the_total():
    builder = StateBuilder()
    builder.update_nvml(NO_NVML)
    builder.update_os(bare_state().os)
    state = builder.build(1.0)
    assert (state.headroom_bytes, state.headroom_total_bytes, state.headroom_source) == (
        11 * GIB,
        16 * GIB,
        "MemAvailable",
    )
