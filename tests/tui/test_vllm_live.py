"""Live: vLLM's own numbers read from the `memsight run` child's log as it streams. The child is a real
process that prints a real vLLM startup log (tests/data/vllm_logs) line by line; the Live screen's vLLM line
fills in from it, next to the plan for the same model/args and NVML's per-process figure."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

from textual.widgets import Static

from collectors.snapshots import GpuProcess
from collectors.vllm_log_follow import VLLMLogFollower, log_buckets
from planner.vllm_log import parse_log
from tests.conftest import REPO_ROOT
from tests.tui.fixed_states import FixedMonitor, two_rank_state
from tui import cmd_run
from tui.app import MemsightApp

LOGS = REPO_ROOT / "tests" / "data" / "vllm_logs"
GIB = 2**30
PRINTER = (
    "import os, sys, time\n"
    "for line in open(sys.argv[1], encoding='utf-8'):\n"
    "    print(line, end='', flush=True)\n"
    "    time.sleep(0.03)\n"
    "while not os.path.exists(sys.argv[2]): time.sleep(0.05)\n"
)


def test_follower_reads_appended_bytes_only_and_loses_no_line(tmp_path):
    text = (LOGS / "pr14447_v0.8_tp4_workers_24gb.log").read_text(encoding="utf-8")
    path = tmp_path / "vllm.log"
    path.write_text("")
    follower = VLLMLogFollower(path, max_read_bytes=100)  # far less than one line per poll
    assert not follower.poll().is_vllm
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
    for _ in range(len(text) // 100 + 2):
        result = follower.poll()
    assert result == parse_log(text)
    assert follower.poll() is result  # nothing new: the same object
    path.write_text("")  # truncated: starts over
    assert not follower.poll().is_vllm
    assert VLLMLogFollower(tmp_path / "missing.log").poll().figures == {}


def test_follower_keeps_multibyte_characters_cut_by_the_read_limit(tmp_path):
    path = LOGS / "onecat237_journald_v100x4.log"
    text = path.read_text(encoding="utf-8")
    for limit in (1, 2, 3, 5, 7):
        follower = VLLMLogFollower(path, max_read_bytes=limit)
        for _ in range(len(text.encode()) // limit + 2):
            result = follower.poll()
        assert result == parse_log(text), limit


def test_log_buckets_from_the_smallest_pool_rank():
    log = parse_log((LOGS / "issue14452_v0.8.5dev_qwq32b-bnb_pp2_rtx5090.log").read_text(encoding="utf-8"))
    b = log_buckets(log)
    assert (b.weights, b.kv_pool, b.activation, b.overhead) == (
        round(10.30 * GIB), round(14.26 * GIB), round(1.77 * GIB), round(0.33 * GIB))  # fmt: skip
    assert b.ranks == 2 and b.total == sum((b.weights, b.kv_pool, b.activation, b.overhead))


async def _live_line(tmp_path, log_name: str, nvml_gib: float | None) -> tuple[str, MemsightApp]:
    log = tmp_path / "child.log"
    go = tmp_path / "exit-now"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-c", PRINTER, str(LOGS / log_name), str(go)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    state = two_rank_state()
    if nvml_gib is not None:  # NVML sees the child (the vLLM process) on GPU 0
        seen_by_nvml = (GpuProcess(proc.pid, round(nvml_gib * GIB), "compute"),)
        device = replace(state.nvml.devices[0], processes=seen_by_nvml)
        state = replace(state, nvml=replace(state.nvml, devices=(device, *state.nvml.devices[1:])))
    child = cmd_run.RunChild(proc, "vllm serve ...", log)
    app = MemsightApp(FixedMonitor(state), source_label="t", child=child)
    expected = parse_log((LOGS / log_name).read_text(encoding="utf-8"))
    text = ""
    try:
        async with app.run_test(size=(200, 48)) as pilot:
            seen = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                app.refresh_data()
                await pilot.pause(0.05)
                line = app.screen.query_one("#live-vllm_log", Static)
                text = str(line.content) if line.display else ""
                if text and text not in seen:
                    seen.append(text)
                if app._vllm_follow.poll() == expected:
                    app.refresh_data()
                    await pilot.pause()
                    text = str(app.screen.query_one("#live-vllm_log", Static).content)
                    break
            assert app._vllm_follow.poll() == expected
            go.touch()
            proc.wait(timeout=20)
            await pilot.press("q")
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
    return text, app


async def test_live_line_fills_from_a_streaming_real_log_with_nvml_outside(tmp_path):
    text, _ = await _live_line(tmp_path, "pr10511_v0.6.5dev_llama3-8b_h100_tp1.log", nvml_gib=72.0)
    assert text.startswith("vLLM (from vLLM's log): weights 14.96 · KV pool 53.29 · activation peak 1.26 · "
                           "non-torch+graphs 1.79 GiB")  # fmt: skip
    # NVML's 72.00 GiB for the process minus vLLM's own 71.30 GiB (the four logged buckets)
    assert "outside vLLM's accounting 0.70 GiB (NVML 72.00 - vLLM 71.30)" in text
    assert "plan: the log's model 'meta-llama/Meta-Llama-3-8B' is not in the local cache" in text


async def test_live_line_shows_the_plan_for_the_same_model_and_args(tmp_path):
    text, _ = await _live_line(tmp_path, "myoceane_v0.19.0_gpt-oss-20b_a100.log", nvml_gib=None)
    assert text.startswith("vLLM 0.19.0 (from vLLM's log): weights 13.72 · KV pool 36.56 · activation peak —")
    assert "| plan, same model/args: KV pool " in text and "GiB PREDICTED" in text
    assert "outside vLLM's accounting" not in text  # NVML does not list the process
