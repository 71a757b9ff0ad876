"""Recording format 2 (issue 20 item 3): each stream written as it changes, read back exactly; format-1
recordings (the bundled demos, a real `memsight run` recording) replay exactly as the format-1 reader did."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import textwrap
import time
from dataclasses import replace

import pytest

from collectors import agent_format as fmt
from collectors.monitor import Monitor
from collectors.nvml_collector import NVMLCollector
from collectors.recorder import KEYFRAME_S, Recorder, record_from_values
from collectors.recording import RecordingReader, read_recording
from collectors.recording_snapshots import nvml_snapshot_from, os_snapshot_from
from collectors.recording_summary import summarize
from collectors.snapshots import DeviceInfo, GpuProcess, NVMLSnapshot, OSSnapshot, ProcessInfo
from tests.collectors.replay_fingerprint import GOLDEN, V1_RECORDINGS, golden
from tests.conftest import REPO_ROOT

GiB = 2**30


@pytest.mark.parametrize("name", sorted(V1_RECORDINGS))
def test_format1_recordings_replay_exactly_as_the_format1_reader_did(name):
    """The `replay --json` document, the state at every recorded tick, after seeks and after advance_to,
    and the scanned summary: digests of what the format-1 code made of the same files (v1_golden.json)."""
    expected = json.loads(GOLDEN.read_text())[name]
    got = json.loads(json.dumps(golden(V1_RECORDINGS[name])))
    for part in ("summarize", "duration_s", "scan", "advance_to", "seeks"):
        assert got[part] == expected[part], part
    assert len(got["steps"]) == len(expected["steps"])
    pairs = enumerate(zip(got["steps"], expected["steps"], strict=True))
    first = next((i for i, (a, b) in pairs if a != b), None)
    assert first is None, f"the state after recorded tick {first} differs"


# ------------------------------------------------------------------------------------------ format 2
def _process(rng: random.Random, pid: int, t: float) -> ProcessInfo:
    return ProcessInfo(
        pid=pid,
        name=rng.choice(("python", "bash", "vllm")),
        cmdline=f"python job{pid}.py --x {pid}",
        user=rng.choice(("root", "ada")),
        rss=rng.choice((64, 128, 512)) * 2**20,  # equal sizes: ties keep the collector's order
        growth_bytes=None,
        is_new=False,
        start_ticks=1000 + pid,
        growth_window_s=0.0,
    )


def _tables(rng: random.Random, ticks: int) -> list[tuple[ProcessInfo, ...]]:
    """A process table as the OS collector makes it: rescanned every other tick (2 Hz, 1 s scans),
    processes coming and going, sizes moving, windows shared by the old ones and their own for the new,
    an exec changing a name; largest RSS first, ties in any order."""
    procs = {pid: _process(rng, pid, 0.0) for pid in range(100, 115)}
    tables = []
    table: tuple[ProcessInfo, ...] = ()
    for tick in range(ticks):
        if tick % 2 == 0:  # a rescan
            window = min(30.0, tick / 2) + rng.choice((0.0, 0.5, 0.999))
            for pid in list(procs):
                p = procs[pid]
                if rng.random() < 0.03:
                    del procs[pid]
                    continue
                rss = p.rss + rng.choice((0, 0, 0, 4096, -4096, 2**20)) if rng.random() < 0.25 else p.rss
                own_window = p.is_new and rng.random() < 0.8
                procs[pid] = replace(
                    p,
                    is_new=p.is_new and rng.random() < 0.8,
                    rss=rss,
                    growth_bytes=rss - p.rss if window >= 30 else None,
                    growth_window_s=round(rng.uniform(0, 5), 3) if own_window else round(window, 3),
                    name="python3" if rng.random() < 0.01 else p.name,
                )
            if rng.random() < 0.2:
                pid = max(procs, default=200) + 1
                procs[pid] = replace(_process(rng, pid, 0.0), is_new=True)
            rows = list(procs.values())
            rng.shuffle(rows)
            table = tuple(sorted(rows, key=lambda p: p.rss, reverse=True))
        tables.append(table)
    return tables


def _os(t: float, table: tuple[ProcessInfo, ...], rng: random.Random) -> OSSnapshot:
    return OSSnapshot(
        t=t,
        mem_total=64 * GiB,
        mem_available=rng.randrange(20 * GiB, 40 * GiB),
        cached=rng.choice((GiB, GiB, 2 * GiB)),
        shmem=9 * 2**20,
        swap_total=0,
        swap_free=0,
        psi_some_avg10=rng.choice((0.0, 0.0, 1.25)),
        psi_full_avg10=None,
        oom_kill=0 if t < 60 else 1,
        processes=table,
        skipped_processes=rng.choice((0, 0, 2)),
    )


def _record(rng: random.Random, t: float, device: int, step: int):
    known = device >= 0
    values = [
        t, device, 2 if known else 1,
        *(rng.randrange(GiB, 8 * GiB) if known else None for _ in range(3)),  # allocated reserved peak
        *(rng.choice((GiB, 2 * GiB)) if known else None for _ in range(2)),  # active inactive_split
        0, 0, 12 if known else None, GiB if known else None, 0 if known else None,
        *((30 * GiB, 80 * GiB, 0) if known else (None, None, None)),  # free total integrated
        rng.randrange(GiB, 2 * GiB), 4 * GiB if known else None, rng.choice((None, GiB)),
        step, 1_700_000_000.5 + step, rng.uniform(1e-5, 3e-4),
        rng.choice(("prefill", "decode")),
    ]  # fmt: skip
    values[21] = round(values[21], 6)  # the recorder keeps the tick cost to the microsecond
    assert len(values) == len(fmt.RECORD_FIELDS) + 1
    return record_from_values(values)


def _nvml(t: float, tick: int, rng: random.Random) -> NVMLSnapshot:
    """Two GPUs whose figures move every second; a third appears for a while; the driver restarts once."""
    devices = tuple(
        DeviceInfo(index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i}", total=80 * GiB, reserved=None,
                   used=rng.choice((10, 11)) * GiB, free=rng.choice((69, 70)) * GiB, unified=False,
                   utilization_gpu=rng.choice((None, 50.0, 99.0)), unsupported=("reserved",),
                   processes=tuple(GpuProcess(7001, rng.choice((GiB, None)), "compute") for _ in range(i)))
        for i in range(3 if 100 < tick < 200 else 2)
    )  # fmt: skip
    driver = "580.65.06" if tick < 300 else "580.95.05"
    return NVMLSnapshot(status="ok", available=True, devices=devices, t=t, driver_version=driver)


def _write_and_read(path, ticks: int = 400, seed: int = 7):
    """Write `ticks` OS samples (2 Hz), NVML (1 Hz) and two agents' records (one on a GPU and the host, one
    host only) through the real Recorder; return what was given."""
    rng = random.Random(seed)
    rec = Recorder(path, hz=2.0)
    given_os, given_agents, given_nvml = [], [], []
    t0 = 1_700_000_000.0
    for tick, table in enumerate(_tables(rng, ticks)):
        t = t0 + tick * 0.5
        snap = _os(t, table, rng)
        rec.os(snap)
        given_os.append(snap)
        if tick % 2 == 0:
            nvml = _nvml(t, tick, rng)
            rec.nvml(nvml)
            if not given_nvml or replace(given_nvml[-1], t=t) != nvml:
                given_nvml.append(nvml)  # an unchanged snapshot is not written: replay holds the last
        for pid, devices in ((7001, (-1, 0)), (7002, (-1,))):
            records = tuple(_record(rng, t + 0.01 * d, d, tick // 40) for d in devices)
            status = "exited" if pid == 7002 and tick > ticks - 20 else "ok"
            rec.agent(pid, 5, f"python serve{pid}.py", f"/tmp/agent-{pid}", 10.0, records, status,
                      status == "ok", tick // 100, 9.5 + (tick // 50) / 10)  # fmt: skip
            given_agents.extend((pid, r, status, tick // 100) for r in records)
    rec.close()
    return given_os, given_agents, given_nvml


def _read_back(path):
    cmdlines, got_os, got_agents, got_nvml = {}, [], [], []
    with RecordingReader(path) as reader:
        for e in reader.events:
            if e["k"] == "proc":
                cmdlines[(e["pid"], e["start"])] = e["cmdline"]
            elif e["k"] == "os":
                got_os.append(os_snapshot_from(e, cmdlines))
            elif e["k"] == "agent":
                got_agents.append((e["pid"], record_from_values(e["r"]), e["status"], e["lost"], e["sr"]))
            elif e["k"] == "nvml":
                got_nvml.append(nvml_snapshot_from(e))
        bad = reader.bad_lines, reader.first_bad
    return got_os, got_agents, got_nvml, bad


def test_format2_gives_back_every_snapshot_and_record_exactly(tmp_path):
    path = tmp_path / "r.jsonl"
    given_os, given_agents, given_nvml = _write_and_read(path)
    got_os, got_agents, got_nvml, bad = _read_back(path)
    assert bad == (0, "")
    assert got_os == given_os  # every field of every process, in the collector's order, ties included
    assert [a[:4] for a in got_agents] == given_agents
    assert {a[4] for a in got_agents} == {9.5 + k / 10 for k in range(8)}
    assert got_nvml == given_nvml and len(given_nvml) > 150
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sum(1 for e in lines if e["k"] == "nvml" and "dset" in e) > 100  # most as changes


def test_format2_writes_each_stream_only_as_it_changes(tmp_path):
    """The process table only when a rescan changed it, only its changed rows (size-only changes as
    [pid, start, rss, growth]); an OS line carries t and the figures that moved; an agent record carries
    the values that changed. Format 1 wrote all of it at every tick."""
    path = tmp_path / "r.jsonl"
    given_os, _, _ = _write_and_read(path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    os_lines = [e for e in lines if e["k"] == "os"]
    tables = sum(1 for a, b in zip(given_os, given_os[1:], strict=False) if a.processes != b.processes)
    with_table = [e for e in os_lines if {"procs", "pset", "pdel"} & set(e)]
    keyframes = math.ceil(len(given_os) * 0.5 / KEYFRAME_S)
    assert len(with_table) <= 1 + tables + keyframes
    assert all(set(e) <= {"k", "t", "mem_available", "cached", "psi_some_avg10", "skipped", "oom_kill", "w"}
               for e in os_lines if "procs" not in e and "pset" not in e and "pdel" not in e)  # fmt: skip
    assert any(len(row) == 4 for e in with_table for row in e.get("pset", ()))
    full_records = [e for e in lines if e["k"] == "agent" and "r" in e]
    assert len(full_records) == 3 * keyframes  # three devices, written in full at each keyframe only
    assert all(e.keys() <= {"k", "pid", "start", "t", "dev", "d", "status", "alive", "lost", "sr"}
               for e in lines if e["k"] == "agent" and "d" in e)  # fmt: skip


def test_a_lost_line_costs_its_streams_until_their_next_complete_line_never_a_wrong_figure(tmp_path):
    path = tmp_path / "r.jsonl"
    given_os, given_agents, _ = _write_and_read(path)
    lines = path.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if '"pset"' in line and i > len(lines) // 3)
    lines[cut] = lines[cut][: len(lines[cut]) // 2] + "\n"  # a torn line in the middle of the file
    path.write_text("".join(lines))
    got_os, got_agents, _, (bad, first_bad) = _read_back(path)
    assert first_bad.startswith(f"line {cut + 1}: malformed JSON")
    by_t = {s.t: s for s in given_os}
    assert got_os and all(s == by_t[s.t] for s in got_os)  # what comes back is exact
    lost = len(given_os) - len(got_os)
    assert 1 <= lost <= KEYFRAME_S * 2 + 1 and bad >= lost  # at most one keyframe interval, all counted
    given = {(pid, r.t, r.device): r for pid, r, _, _ in given_agents}
    assert all(given[(pid, r.t, r.device)] == r for pid, r, *_ in got_agents)


def test_replay_json_of_format2_counts_what_format1_would(tmp_path):
    """`memsight replay --json` reads format 2's unchanged rows as samples of the same processes."""
    path = tmp_path / "r.jsonl"
    given_os, _, _ = _write_and_read(path, ticks=120)
    doc = summarize(read_recording(path))
    assert doc["version"] == 2 and doc["bad_lines"] == 0
    samples = {s["id"]: s for s in doc["sources"]}
    for pid in {p.pid for snap in given_os for p in snap.processes}:
        seen = [(s.t, p) for s in given_os for p in s.processes if p.pid == pid]
        src = samples[f"process:{pid}:{1000 + pid}"]
        assert src["samples"] == len(seen) and (src["start"], src["end"]) == (seen[0][0], seen[-1][0])
        rss = [p.rss for _, p in seen]
        assert src["fields"]["rss"] == {"min": min(rss), "max": max(rss), "last": rss[-1]}


# ------------------------------------------------------------------------------------------ the monitor
AGENT_CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    import collectors.agent as agent
    agent.start(hz=10, directory={dir!r})
    print("ready", flush=True)
    time.sleep(30)
""")


def _no_nvml() -> NVMLCollector:
    class Missing:
        def init(self):
            raise RuntimeError("no NVML library: test")

    return NVMLCollector(Missing())


@pytest.mark.parametrize("rate", [None, math.inf])
def test_monitor_keeps_agents_at_its_rate_and_records_only_this_runs(tmp_path, rate):
    """Two real agents at 10 Hz, one of them this run's, under a 2 Hz monitor: the recording holds this
    run's agent alone, one record per tick (every record with `all`), and the rate it really sampled at."""
    agent_dir = tmp_path / "agents"
    agent_dir.mkdir(mode=0o700)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", AGENT_CHILD.format(root=str(REPO_ROOT), dir=str(agent_dir))],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready"
        out = tmp_path / "rec.jsonl"
        mine = children[0].pid
        monitor = Monitor(hz=2, agent_dir=str(agent_dir), record_to=out, nvml=_no_nvml(),
                          discover_interval_s=0.2, agent_record_hz=rate)  # fmt: skip
        monitor.set_scope(lambda pids: frozenset(pids) & {mine})
        monitor.start()
        time.sleep(3.2)
        monitor.stop()  # reads the agents' last records
        state = monitor.state()
    finally:
        for child in children:
            child.kill()
            child.wait()
    views = {v.pid: v for v in state.agents}
    assert set(views) == {mine}  # the other run's agent is not read at all (issue 21 item 6)
    assert 6 <= views[mine].sampled_hz <= 11  # measured on every record read, kept or not
    events = read_recording(out).events
    assert {e["pid"] for e in events if e["k"] in ("agent_meta", "agent", "agent_info")} == {mine}
    records = [e for e in events if e["k"] == "agent"]
    ticks = sum(1 for e in events if e["k"] == "os")
    if rate is None:
        assert len(records) <= ticks + 1 and len(views[mine].history) == len(records)
    else:
        assert len(records) >= 2 * ticks
    assert 6 <= records[-1]["sr"] <= 11


def test_seeking_back_from_checkpoints_is_exact(monkeypatch):
    """A seek back restarts from the nearest checkpoint (kept every CHECKPOINT_S, thinned to
    MAX_CHECKPOINTS): every state it lands on is the one a replay without checkpoints, walking from the
    first line after the same seeks, reaches."""
    from collectors import replay as replay_mod
    from collectors.replay import ReplayMonitor, demo_recording_path
    from collectors.state import unpack
    from tests.collectors.replay_fingerprint import digest

    monkeypatch.setattr(replay_mod, "MAX_CHECKPOINTS", 5)  # 142 s every 4 s: thinned twice on the way
    monkeypatch.setattr(replay_mod, "CHECKPOINT_S", 4.0)
    path = demo_recording_path()
    replay = ReplayMonitor(path)
    walked = ReplayMonitor(path, seekable=False)  # keeps no checkpoint: a seek back starts from the start
    duration = replay.duration_s
    unpacked = []  # the long-kept checkpoints are packed (collectors/state.py pack): restored by unpack
    monkeypatch.setattr(replay_mod, "unpack", lambda packed: unpacked.append(packed) or unpack(packed))
    offsets = (duration, duration * 0.9, 3.0, duration * 0.5, duration * 0.51, 0.0, duration / 4, 17.3,
               duration, duration * 0.6, duration * 0.3)  # fmt: skip
    for offset in offsets:
        replay.seek(offset)
        walked.seek(offset)
        assert digest(replay.state()) == digest(walked.state()), offset
    assert 3 <= len(replay._checkpoints) <= 5 and not walked._checkpoints and not walked._recent
    # from packed checkpoints: 0.0 s (the start's: the first tick's state is built and kept), 3.0 s, 17.3 s,
    # 60% and 30% (90%: a recent one)
    assert len(unpacked) == 5
    replay.close()
    walked.close()
