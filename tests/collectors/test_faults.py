"""Faults (issue 12): a disk that fills while recording (a real 16 KiB tmpfs where the test may mount one,
and /dev/full, the kernel's always-full device), a sampling thread that dies, and every NVML error class
pynvml defines injected at random into the backend calls of NVML replayed from a recorded nvidia-smi."""

from __future__ import annotations

import inspect
import os
import random
import subprocess
import sys
import threading
import time

import pytest

from collectors.nvidia_smi import SmiBackend
from collectors.nvml_collector import NVMLCollector
from collectors.recorder import Recorder
from collectors.recording import read_recording
from tests.conftest import REPO_ROOT, SHARED_FIXTURES, needs_shared

RTX3090 = "nvidia-smi_rtx3090_vllm-22382MiB_590.48.01.txt"


class _NoNVML:
    def init(self):
        raise ImportError("no pynvml in this test")


# ------------------------------------------------------------------------------------ disk full
def test_recorder_on_a_full_device_stops_and_says_why():
    """/dev/full fails every write with ENOSPC, as a full disk does."""
    recorder = Recorder("/dev/full", flush_interval_s=0.0)  # the header's flush already meets ENOSPC
    assert (
        recorder.failed
        == "recording stopped: cannot write /dev/full: No space left on device (no record reached it)"
    )
    recorder.flush()
    recorder.close()  # nothing raised: the error was said once, in `failed`


def test_monitor_recording_to_a_full_device_keeps_sampling_and_shows_it(tmp_path):
    from collectors.monitor import Monitor
    from tui.app import live_status

    monitor = Monitor(agent_dir=str(tmp_path / "a"), record_to="/dev/full", nvml=NVMLCollector(_NoNVML()))
    monitor.recorder.flush_interval_s = 0.0
    state = monitor.sample_once()
    assert state.os is not None  # sampling goes on
    assert state.source_status["recording"].startswith("recording stopped: cannot write /dev/full: No space")
    assert "recording stopped: cannot write /dev/full" in live_status(state, "pid 1")
    monitor.stop()
    assert monitor.recording_failed == state.source_status["recording"]


# A writer that may not grow a file past LIMIT bytes (RLIMIT_FSIZE, SIGXFSZ ignored: a write past it takes
# what fits, then fails with EFBIG), as a disk that fills does; no root needed.
# The limit counts from the end of the header, whose length varies with the host's name and the clock's
# digits: the records after it are the same bytes on every machine, so the cut lands at the same place.
LIMITED_RECORDER = """
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from collectors.recorder import Recorder
recorder = Recorder(sys.argv[1])
recorder.flush()  # the header reaches the file before the limit is set
limit = os.path.getsize(sys.argv[1]) + int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
for k in range(200):
    recorder.scope(1000.0 + k, frozenset(range(k % 7)))
recorder.close()
print(recorder.failed)
"""


def _file_size_limit():
    """preexec_fn: the child and what it runs may not write past 0 bytes into any file; SIG_IGN on SIGXFSZ is
    inherited across exec, so writes fail with EFBIG instead of killing the process."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_a_failed_write_says_how_many_whole_records_reached_the_file(tmp_path):
    """issue 17 item 5: the count was of the records handed to a buffer, not of those in the file (on a full
    disk: "kept the first 22 record(s)" of a 0-byte file)."""
    out = tmp_path / "rec.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", LIMITED_RECORDER, str(out), "2900"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = out.read_bytes()
    whole = data.count(b"\n")
    header_length = data.index(b"\n") + 1
    assert 0 < whole < 201 and len(data) == header_length + 2900
    assert not data.endswith((b"\n", b"}"))  # the limit cut the stream mid-line, not at a record's end
    assert done.stdout.strip() == (
        f"recording stopped: cannot write {out}: File too large (kept the first {whole} record(s), whole)"
    )
    recording = read_recording(out)  # the header and every whole record read back; the cut line is skipped
    assert len(recording.events) == whole - 1 and recording.truncated_tail


def test_run_json_with_a_recording_that_cannot_be_written_says_why_and_keeps_the_summary(tmp_path):
    """issue 17 item 5: when nothing reached the recording, `run --json` failed with "empty or not a memsight
    recording", hiding the cause; now the JSON carries the cause and the monitor's own summary."""
    import json

    out = tmp_path / "run.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "run", "--headless", "--json", "--record", str(out),
         "--agent-dir", str(tmp_path / "agents"), "--", sys.executable, "-c", "raise SystemExit(3)"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, preexec_fn=_file_size_limit,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # the command's status
    assert "Traceback" not in done.stderr
    cause = f"recording stopped: cannot write {out}: File too large (no record reached it)"
    assert f"memsight: {cause}" in done.stderr.splitlines()
    doc = json.loads(done.stdout)
    assert doc["recording_failed"] == cause
    assert doc["unreadable"] == f"{out}: empty or not a memsight recording" and doc["sources"] == []
    assert doc["summary"]["start"] <= doc["summary"]["end"]  # the monitor's, not lost with the file
    assert os.path.getsize(out) == 0


@pytest.fixture
def tiny_fs(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(mount)], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a 4 KiB tmpfs here: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 4 KiB tmpfs here (root needed): {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], capture_output=True, timeout=10)


def test_memsight_run_on_a_disk_that_fills_exits_with_the_childs_status(tiny_fs, tmp_path):
    """issue 12: recording stopped silently, then an OSError traceback at exit and status 1."""
    out = tiny_fs / "run.jsonl"
    child = "import time; time.sleep(3); raise SystemExit(3)"
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "run", "--headless", "--record", str(out),
         "--agent-dir", str(tmp_path / "agents"), "--", sys.executable, "-c", child],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # the child's status, not memsight's trouble
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if "recording stopped" in line]
    assert len(lines) == 1 and lines[0].startswith(
        f"memsight: recording stopped: cannot write {out}: No space"
    )
    recording = read_recording(out)  # what reached the disk reads back
    assert recording.header["hz"] > 0 and len(recording.events) > 1
    assert os.path.getsize(out) <= 4 * 1024


# ------------------------------------------------------------------------------------ a sampling thread dies
class _Unprintable(RuntimeError):
    def __str__(self):  # the monitor's error guards format the error: each guard raises in turn
        raise _Unprintable()


def test_a_sampling_thread_that_dies_is_restarted_and_reported(tmp_path):
    from collectors.exporter import render_metrics
    from collectors.monitor import Monitor
    from collectors.os_collector import OSCollector
    from collectors.vllm_metrics import parse_prometheus_text

    class Failing(OSCollector):
        calls = 0

        def sample(self, include_pids=()):
            Failing.calls += 1
            if Failing.calls == 3:
                raise _Unprintable()
            return super().sample(include_pids)

    monitor = Monitor(
        hz=20, agent_dir=str(tmp_path / "a"), os_collector=Failing(), nvml=NVMLCollector(_NoNVML())
    )
    monitor.start()
    try:
        deadline = time.monotonic() + 5.0
        while Failing.calls < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Failing.calls >= 12  # sampling went on after the thread died at call 3
        state = monitor.state()
        assert dict(state.restarts) == {"os": 1}
        assert state.source_status["threads"] == (
            "os sampling restarted 1× (last: _Unprintable (its message could not be formatted))"
        )
        assert [t.name for t in threading.enumerate()].count("memsight-os") == 1
        scrape = parse_prometheus_text(render_metrics(state))
        (restarts,) = scrape.values("memsight_sampler_restarts_total")
        assert restarts.labels == (("thread", "os"),) and restarts.value == 1
        from tui.app import live_status

        assert "os sampling restarted 1×" in live_status(state, "pid 1")
    finally:
        monitor.stop()


# ------------------------------------------------------------------------------------ NVML errors
def _nvml_error_classes():
    pynvml = pytest.importorskip("pynvml")
    classes = [c for c in vars(pynvml).values() if inspect.isclass(c) and issubclass(c, pynvml.NVMLError)]
    return pynvml, [c for c in classes if c is not pynvml.NVMLError]


class _Injecting:
    """A recorded nvidia-smi behind the backend interface; each call raises a random NVML error class
    (made as pynvml makes them: NVMLError(code) -> its subclass) with probability `p`."""

    CALLS = ("device_count", "driver_version", "name", "uuid", "memory_info_v2", "memory_info",
             "utilization_gpu", "compute_processes", "graphics_processes")  # fmt: skip

    def __init__(self, inner, errors, rng, p):
        self._inner, self._errors, self._rng, self._p = inner, errors, rng, p
        self.raised: list[type] = []

    def init(self):
        return self._inner.init()

    def shutdown(self):
        return self._inner.shutdown()

    def __getattr__(self, name):
        real = getattr(self._inner, name)
        if name not in self.CALLS:
            return real

        def call(*args):
            if self._rng.random() < self._p:
                error = self._rng.choice(self._errors)
                self.raised.append(type(error))
                raise error
            return real(*args)

        return call


@needs_shared
def test_every_nvml_error_class_injected_at_random_is_shown_as_what_it_is(tmp_path):
    from collectors.monitor import Monitor

    pynvml, classes = _nvml_error_classes()
    assert len(classes) >= 30  # nvidia-ml-py 12+ defines 31 subclasses
    errors = [pynvml.NVMLError(_code(pynvml, c)) for c in classes]
    assert {type(e) for e in errors} == set(classes)
    inner = SmiBackend.from_text((SHARED_FIXTURES / RTX3090).read_text())
    backend = _Injecting(inner, errors, random.Random(12), p=0.3)
    collector = NVMLCollector(backend, process_interval_s=0.0)
    monitor = Monitor(agent_dir=str(tmp_path / "a"), nvml=collector)
    seen: set[str] = set()
    for _ in range(400):
        monitor.sample_nvml()  # never raises
        snap = monitor.state().nvml
        if not snap.available:
            assert snap.status.startswith("NVML device count failed: NVMLError_"), snap.status
            seen.add(snap.status.split(": ", 1)[1].split(" ", 1)[0])
            continue
        for device in snap.devices:
            for entry in device.errors:
                field, what = entry.split(": ", 1)
                assert what.startswith("NVMLError_") and " (code " in what, entry
                seen.add(what.split(" ", 1)[0])
            if "NVMLError_NotSupported" in {t.__name__ for t in backend.raised}:
                pass
    raised = {t.__name__ for t in backend.raised}
    assert raised == {c.__name__ for c in classes}  # every class was injected
    # every class but NotSupported (recorded as unsupported, not an error) was shown by its own name
    assert seen >= raised - {"NVMLError_NotSupported"}
    monitor.stop()


def _code(pynvml, cls) -> int:
    for value, mapped in pynvml.NVMLError._valClassMapping.items():
        if mapped is cls:
            return value
    raise AssertionError(f"{cls.__name__} has no NVML code")
