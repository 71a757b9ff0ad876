"""The Live line about a vLLM start (tui/screens/startup_view.py): will it start on what the monitor measures,
what a refusal's own figures say to change, what grew on the host during its profile run."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

import pytest
from textual.widgets import Static

from collectors.nvidia_smi import SmiBackend
from collectors.nvml_collector import NVMLCollector
from collectors.snapshots import OSSnapshot, ProcessInfo
from collectors.state import StateBuilder
from planner.engines.vllm.log import parse_log
from tests.conftest import REPO_ROOT, SHARED_FIXTURES, load_script, needs_shared
from tests.tui.fixed_states import FixedMonitor, two_rank_state
from tui import cmd_run
from tui.app import MemsightApp
from tui.screens.startup_view import StartupWatch

LOGS = REPO_ROOT / "tests" / "data" / "vllm_logs"
GB10_LOG = "vllmrouter_ngc26.01_v0.13.0_gpt-oss-20b_gb10.log"  # a real vLLM 0.13.0 start on a DGX Spark
GIB, MIB = 2**30, 2**20


def _gb10_nearly_full(pid: int = 0):
    """The GB10 of ../shared/fixtures *_vllm-truncated-10707 (top: 964.8 MiB free, 2347.9 MiB available),
    NVML from its nvidia-smi table, through the monitor's own StateBuilder."""
    top = (SHARED_FIXTURES / "top_gb10_vllm-truncated-10707.txt").read_text()
    figures, _ = load_script("gb10_recording").parse_top(top)
    nvml = NVMLCollector(
        SmiBackend.from_text((SHARED_FIXTURES / "nvidia-smi_gb10_vllm-truncated-10707.txt").read_text())
    ).sample()
    host = OSSnapshot(
        1000.0,
        figures["total"],
        figures["avail"],
        figures["buff/cache"],
        149 * MIB,
        figures["swap_total"],
        figures["swap_free"],
        None,
        None,
        None,
        (),
        mem_free=figures["free"],
        buffers=0,
    )
    builder = StateBuilder()
    builder.update_nvml(nvml)
    builder.update_os(host)
    return builder.build(1000.0)


def _lines_until(text: str, marker: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[: next(i for i, line in enumerate(lines) if marker in line)])


@needs_shared
def test_before_the_weights_it_says_whether_the_check_will_pass_on_a_nearly_full_gb10():
    log = parse_log(_lines_until((LOGS / GB10_LOG).read_text(), "Loading weights took"))
    assert log.stage in ("start", "config") and log.setting("gpu_memory_utilization") == "0.25"
    state = _gb10_nearly_full()
    line = StartupWatch().line(log, state, frozenset(), {})
    # 0.13.0 reads MemAvailable on a GB10 (compute 12.1): 2347.9 MiB < 0.25 x MemTotal 122502.8 MiB
    assert line.startswith(
        "will it start? vLLM 0.13.0+faa43dbf.nv26.01 start-up check: FAILS by 27.62 GiB: "
        "reads MemAvailable 2.29 GiB < requested 0.25 x 119.63 GiB = 29.91 GiB"
    )
    assert line.endswith(
        "· fix: --gpu-memory-utilization 0.01 passes now (1.20 GiB requested of 2.29 GiB MemAvailable)"
    )


def test_a_refusal_is_explained_from_vllm_s_own_figures():
    log = parse_log((LOGS / "kvcached29_v0.9.2_free_memory_error.log").read_text())
    unnamed = StartupWatch().line(log, two_rank_state(), frozenset(), {})
    assert unnamed.startswith("vLLM refused to start: it read 59.32 GiB free of 79.15 GiB (its log names no")
    line = StartupWatch().line(log, two_rank_state(), frozenset(), {"version": "0.9.2"})  # --vllm-version
    assert line == (
        "vLLM 0.9.2 refused to start: it read 59.32 GiB free of 79.15 GiB (cudaMemGetInfo free) < 71.24 GiB "
        "requested · fix: --gpu-memory-utilization 0.74 passes now (58.57 GiB requested of 59.32 GiB "
        "cudaMemGetInfo free)"
    )


@pytest.mark.parametrize(
    ("nvml", "usual"),
    [
        # no GPU named: the local-memory part is the unknown GPU's (an A100's logged 0.10 GiB)
        (None, "60.10 GiB above the 0.10 GiB vLLM 0.10.2 normally counts"),
        # NVML names H100s: an H100's resident threads size it
        (two_rank_state().nvml, "60.06 GiB above the 0.14 GiB vLLM 0.10.2 normally counts"),
    ],
)
def test_after_start_a_high_non_torch_is_set_against_what_grew_during_the_profile_run(nvml, usual):
    # The page cache figures are a GB10's, recorded while a 60 GiB file was written (unsloth PR 10704:
    # Cached 12.64 -> 72.64 GiB, MemAvailable 115.85 -> 115.65 GiB). The log is SYNTHETIC: a V0 0.10.2-shaped
    # breakdown line (v0.8.5 worker.py:271-285 wording) whose non-torch is far above the version's usual, as
    # such a page-cache growth makes it on a version that reads MemFree; no recorded log holds one.
    def log_at(stage_lines: str):
        return parse_log("INFO 01-01 00:00:00 [api_server.py] vLLM API server version 0.10.2\n" + stage_lines)

    loaded = "INFO 01-01 00:00:10 [worker.py] Model loading took 14.9596 GiB and 5.1 seconds\n"
    profiled = (
        "INFO 01-01 00:01:00 [worker.py] Memory profiling takes 30.11 seconds\nthe current vLLM instance can "
        "use total_gpu_memory (121.69GiB) x gpu_memory_utilization (0.90) = 109.52GiB\nmodel weights take "
        "14.96GiB; non_torch_memory takes 60.20GiB; PyTorch activation peak memory takes 1.26GiB; "
        "the rest of the memory reserved for KV Cache is 33.10GiB.\n"
    )
    watch = StartupWatch()
    engine = 4242

    def state_at(t: float, cached_gib: float, available_gib: float, rss_gib: float):
        procs = (ProcessInfo(engine, "python", "vllm serve", "me", round(rss_gib * GIB), None, False),)
        host = OSSnapshot(
            t,
            round(121.69 * GIB),
            round(available_gib * GIB),
            round(cached_gib * GIB),
            0,
            0,
            0,
            None,
            None,
            None,
            procs,
            mem_free=round(41.52 * GIB),
            buffers=0,
        )
        builder = StateBuilder()
        builder.update_os(host)
        built = builder.build(t)
        return built if nvml is None else replace(built, nvml=nvml)

    pids = frozenset({engine})
    watch.observe(log_at(loaded), state_at(100.0, 12.64, 115.85, 3.0), pids, 100.0)
    for t, cached in ((110.0, 30.0), (130.0, 72.64)):
        watch.observe(log_at(loaded), state_at(t, cached, 115.65, 4.5), pids, t)
    final = log_at(loaded + profiled)
    watch.observe(final, state_at(150.0, 72.64, 115.65, 4.5), pids, 150.0)
    line = watch.line(final, state_at(150.0, 72.64, 115.65, 4.5), pids, {})
    assert line.startswith(f"vLLM counted 60.20 GiB as non-torch memory, {usual}: ")
    assert (
        "during its profile run (50 s, 3 samples), the page cache grew 60.00 GiB, the engine's resident "
        "memory 1.50 GiB (a compiler heap: torch.compile, Triton), MemAvailable fell 0.20 GiB" in line
    )


@needs_shared
async def test_the_live_screen_shows_the_start_up_line_while_vllm_starts(tmp_path):
    head = tmp_path / "head.log"
    head.write_text(_lines_until((LOGS / GB10_LOG).read_text(), "Loading weights took"))
    log = tmp_path / "child.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"print(open({str(head)!r}).read(), flush=True); import time; time.sleep(30)",
            ],
            stdout=out,
        )
    state = replace(_gb10_nearly_full(), t=time.time())
    app = MemsightApp(FixedMonitor(state), child=cmd_run.RunChild(proc, "vllm serve ...", log))
    try:
        async with app.run_test(size=(200, 48)) as pilot:
            text = ""
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not text:
                app.refresh_data()
                await pilot.pause(0.1)
                line = app.screen.query_one("#live-startup", Static)
                text = str(line.content) if line.display else ""
            assert text.startswith(
                "will it start? vLLM 0.13.0+faa43dbf.nv26.01 start-up check: FAILS by 27.62"
            )
    finally:
        proc.kill()
        proc.wait()
