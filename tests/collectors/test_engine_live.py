"""The live path for SGLang and Ollama: the `memsight run` child's log followed as it streams (real published
logs written into a file piece by piece, as a server writes them), the engine's own figures in the state and
in the recording, and `memsight run --headless --record` doing the same with a real child process."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from collectors.engine_log_follow import EngineLogFollower
from collectors.monitor import Monitor
from collectors.recorder import check_event, read_recording, summarize
from tests.conftest import REPO_ROOT

DATA = REPO_ROOT / "tests" / "data"
SGLANG = DATA / "sglang_logs" / "llmsinclouds_v0.4.3.post4_qwq32b_tp4_l4.log"
OLLAMA = DATA / "ollama_logs" / "howtorun_a10_qwen3-30b-a3b-q8_0_ctx32k.log"
GiB = 2**30


class _NoNVML:
    def init(self):
        raise ImportError("no pynvml here")


def _monitor(**kwargs) -> Monitor:
    from collectors.nvml_collector import NVMLCollector  # noqa: PLC0415

    return Monitor(hz=5, nvml=NVMLCollector(_NoNVML()), **kwargs)


def test_a_streamed_sglang_log_fills_the_engines_buckets(tmp_path):
    log = tmp_path / "child.log"
    log.write_bytes(b"")
    follower = EngineLogFollower(log, max_read_bytes=500)  # far less than the log: many polls
    text = SGLANG.read_bytes()
    seen = []
    with log.open("ab") as f:
        for i in range(0, len(text), 333):  # pieces that cut lines and UTF-8 anywhere
            f.write(text[i : i + 333])
            f.flush()
            followed = follower.poll()
            seen.append(None if followed is None else followed.buckets.stage if followed.buckets else "")
    for _ in range(len(text) // 500 + 2):  # what the read limit left behind comes on the next polls
        followed = follower.poll()
    assert followed.engine == "sglang" and followed.title == "SGLang"
    gpu = followed.buckets.gpu
    assert (gpu.weights, gpu.kv) == (round(15.54 * GiB), 2 * round(1.42 * GiB))
    assert followed.buckets.ranks == 4
    assert seen[0] in (None, "")  # the command line names SGLang; no figure is claimed before it is logged


def test_monitor_follows_and_records_an_ollama_log(tmp_path):
    log = tmp_path / "child.log"
    log.write_text(OLLAMA.read_text()[:60])  # the first line, cut
    record = tmp_path / "run.jsonl"
    monitor = _monitor(record_to=record)
    monitor.follow_log(log)
    state = monitor.sample_once()
    assert state.engine_log is None  # not one whole Ollama memory line yet
    with log.open("a") as f:
        f.write(OLLAMA.read_text()[60:])
    state = monitor.sample_once()
    monitor.stop()
    followed = state.engine_log
    assert followed.engine == "ollama"
    cuda = followed.buckets.device("CUDA0")
    assert (cuda.weights, cuda.kv, cuda.activations) == (
        round(18.5 * GiB),
        round(1.9 * GiB),
        round(190.5 * 2**20),
    )
    recording = read_recording(record)
    events = [e for e in recording.events if e["k"] == "engine_log"]
    assert events and events[-1]["engine"] == "ollama"
    assert events[-1]["devices"][0]["kv"] == round(1.9 * GiB)
    for e in events:
        check_event(e)
    sources = {s["id"]: s for s in summarize(recording)["sources"]}
    assert sources["engine_log:ollama"]["fields"]["kv:CPU"]["last"] == round(1.1 * GiB)


def test_hostile_engine_events_are_refused_by_the_reader():
    import pytest  # noqa: PLC0415

    for bad in (
        {"k": "engine_log", "t": 1.0, "engine": "x", "devices": [{"device": 3}]},
        {"k": "engine_log", "t": 1.0, "engine": "x", "figures": {"a": "b"}},
        {"k": "engine", "t": 1.0, "loads": ["not a load"]},
    ):
        with pytest.raises(ValueError):
            check_event(bad)


def test_headless_record_follows_a_real_child_log(tmp_path):
    """`memsight run --headless --record` on a child that prints a published SGLang log as it goes: the
    child's output still reaches the terminal, and the recording holds SGLang's own figures."""
    printer = (
        "import sys, time\n"
        f"text = open({str(SGLANG)!r}, encoding='utf-8').read()\n"
        "for line in text.splitlines(True):\n"
        "    sys.stdout.write(line); sys.stdout.flush()\n"
        "time.sleep(0.6)\n"
    )
    record = tmp_path / "run.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "run", "--headless", "--record", str(record), "--hz", "5",
         "--", sys.executable, "-c", printer],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path),
             "MEMSIGHT_AGENT_DIR": str(tmp_path / "agents")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "KV Cache is allocated" in done.stdout  # the user still sees CMD's output
    events = [json.loads(line) for line in record.read_text().splitlines()]
    logged = [e for e in events if e["k"] == "engine_log"]
    assert logged and logged[-1]["engine"] == "sglang"
    gpu = logged[-1]["devices"][0]
    assert gpu["weights"] == round(15.54 * GiB) and gpu["kv"] == 2 * round(1.42 * GiB)
    assert list(pathlib.Path(tmp_path).glob("memsight-run-*.log"))  # the followed copy of CMD's output
