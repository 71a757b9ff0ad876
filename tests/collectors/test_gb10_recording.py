"""A recorded GB10 moment (scripts/gb10_recording.py: its nvidia-smi, free -h, top and df -h) replayed through
memsight: the pool's decomposition, exact to what the machine printed, and the Live screen that shows it."""

from __future__ import annotations

import pytest

from collectors.replay import ReplayMonitor
from tests.conftest import load_script, needs_shared
from tui.app import MemsightApp
from tui.screens.pool_view import pool_data
from tui.widgets.pool_parts import PoolParts

MiB = 2**20
KiB = 2**10


@pytest.fixture
def gb10_replay(tmp_path):
    path = load_script("gb10_recording").write(tmp_path / "gb10.jsonl")
    replay = ReplayMonitor(path)
    while not replay.at_end:
        replay.step()
    return replay


@needs_shared
def test_the_recorded_moment_decomposes_to_what_the_machine_printed(gb10_replay):
    state = gb10_replay.state()
    parts = state.pool
    assert state.unified and parts.unified
    # top: "MiB Mem : 122502.8 total, 1281.0 free, ... 44936.8 buff/cache", "44730.9 avail Mem"
    assert parts.total == round(122502.8 * 1024) * KiB
    assert parts.free == round(1281.0 * 1024) * KiB and parts.available == round(44730.9 * 1024) * KiB
    # nvidia-smi: Xorg 179 MiB, gnome-shell 48 MiB, VLLM::EngineCore 61383 MiB; memory info Not Supported
    assert parts.gpu_held == (61383 + 179 + 48) * MiB
    # free -h: shared 385Mi; buff/cache less what of it is shared memory is page cache
    assert parts.shmem == 385 * MiB and parts.page_cache == round(44936.8 * 1024) * KiB - 385 * MiB
    assert parts.dev_shm == 0  # df -h: tmpfs 60G, 0 used, on /dev/shm
    assert parts.not_read == ("processes", "kernel")
    assert parts.unitemized == parts.total - parts.free - parts.page_cache - parts.shmem
    view = pool_data(state)
    assert [seg.key for seg in view.parts] == ["gpu", "unitemized", "cache", "shmem", "free"]
    assert dict((seg.key, seg.bytes) for seg in view.parts)["unitemized"] == parts.unitemized - parts.gpu_held
    text = "\n".join(view.lines)
    # MemAvailable - MemFree = 44730.9 - 1281.0 MiB = 42.4 GiB: CUDA's free (MemFree on a GB10) counts it used
    assert "on a GB10 CUDA's free is MemFree: page cache counts as used, 42.4 GiB under MemAvailable" in text
    assert "GPU (NVML per process) 60.2" in text
    assert "not itemized (with processes, kernel: not read) 14.3" in text


@needs_shared
async def test_the_live_screen_shows_the_decomposition(gb10_replay):
    app = MemsightApp(gb10_replay, source_label="replay of a recorded GB10", manage_monitor=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        widget = app.screen.query_one(PoolParts)
        assert widget.display and widget.data == pool_data(gb10_replay.state())
        rendered = str(widget.render())
        assert rendered.startswith("where the pool is: unified pool (GPU and CPU), 119.6 GiB (MemTotal)")
        assert "█ GPU (NVML per process) 60.2" in rendered
