"""Reading a recording does not load the snapshot classes (issue 20: `memsight replay --json` pays for what
its document needs, not for the live monitor's model), and the checks that stand in for those classes hold to
them: the fields recording_checks.py writes out for the lists whose items become DeviceInfo, GpuProcess and
VLLMModelStats are the classes' own, with the same defaults. A behaviour test (which modules a fresh
interpreter loaded), not a timing one: bench/replay_cost.py measures the CPU."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys

import pytest

from collectors import recording_checks
from collectors.snapshots import DeviceInfo, GpuProcess, VLLMModelStats
from tests.conftest import REPO_ROOT


@pytest.mark.parametrize(
    ("cls", "kinds", "names"),
    [
        (DeviceInfo, recording_checks._DEVICE_FIELDS, recording_checks._DEVICE_NAMES),
        (GpuProcess, recording_checks._GPU_PROCESS_FIELDS, recording_checks._GPU_PROCESS_NAMES),
        (VLLMModelStats, recording_checks._VLLM_MODEL_FIELDS, recording_checks._VLLM_MODEL_NAMES),
    ],
    ids=["device", "gpu-process", "vllm-model"],
)
def test_the_checked_fields_are_the_snapshot_classes_fields(cls, kinds, names):
    """What check_event allows is what the class takes; what it requires, the fields with no default that no
    converter fills in (the "list-" ones: a device's processes, unsupported and errors)."""
    allowed, required = names
    fields = dataclasses.fields(cls)
    assert allowed == {f.name for f in fields}
    missing = dataclasses.MISSING
    no_default = {f.name for f in fields if f.default is missing and f.default_factory is missing}
    filled_in = {name for name, kind in kinds.items() if kind == "list-"}
    assert required == no_default - filled_in
    assert required, "a class whose every field may be left out: the check would accept {}"


def test_a_device_missing_a_field_its_class_needs_is_refused_and_one_with_an_unknown_field_too():
    device = {
        "index": 0, "name": "NVIDIA GB10", "uuid": "GPU-1", "total": None, "reserved": None, "used": None,
        "free": None, "unified": True, "utilization_gpu": 12.0, "processes": [], "unsupported": ["total"],
    }  # fmt: skip
    event = {"k": "nvml", "t": 1.7e9, "status": "ok", "available": True, "devices": [device]}
    recording_checks.check_event(event)  # errors has a default: it may be left out
    DeviceInfo(**{**device, "processes": (), "unsupported": ("total",)})  # and the class agrees
    with pytest.raises(ValueError, match="nvml device: uuid is missing"):
        recording_checks.check_event({**event, "devices": [{k: v for k, v in device.items() if k != "uuid"}]})
    with pytest.raises(ValueError, match="nvml device: has unknown field 'fan'"):
        recording_checks.check_event({**event, "devices": [{**device, "fan": 3}]})


CODE = """
import sys
before = set(sys.modules)
from tui.cli import main
code = main(sys.argv[1:])
print(repr({"code": code, "loaded": sorted(set(sys.modules) - before)}), file=sys.stderr)
"""
# the live monitor's model and what only it needs: the snapshot classes (17 dataclasses, 20 ms to define),
# dataclasses itself (it pulls inspect), the ring reader, the writer and the run summary's classes
NOT_FOR_A_DOCUMENT = {
    "collectors.snapshots", "dataclasses", "inspect", "collectors.agent_reader", "collectors.recorder",
    "collectors.summary", "collectors.recording_snapshots", "collectors.replay", "tempfile",
}  # fmt: skip


def test_replay_json_of_a_recording_with_a_gpu_and_an_agent_loads_no_snapshot_class(tmp_path):
    """bench/day_recording.py's recording (the real Recorder: a GPU and its process, an agent's complete and
    changed records, a process table, an alert, the agent's info file, the run's summary), 2 minutes of it,
    through `memsight replay FILE --json` as a user runs it: the document is complete and none of those
    modules was imported."""
    from bench.day_recording import make  # noqa: PLC0415

    path = tmp_path / "day.jsonl"
    make(path, 2 / 60)
    done = subprocess.run(
        [sys.executable, "-c", CODE, "replay", str(path), "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = ast.literal_eval(done.stderr.splitlines()[-1])
    assert report["code"] == 0
    doc = json.loads(done.stdout)
    kinds = {s["kind"] for s in doc["sources"]}
    assert {"os", "agent", "nvml", "gpu_process", "process"} <= kinds
    agent = next(s for s in doc["sources"] if s["kind"] == "agent")
    assert agent["samples"] == 240 and agent["fields"]["gap"]["max"] > 0
    assert doc["summary"] is not None and doc["summary_from"] == "recorded"
    loaded = set(report["loaded"])
    assert not loaded & NOT_FOR_A_DOCUMENT, f"replay --json imported {sorted(loaded & NOT_FOR_A_DOCUMENT)}"
