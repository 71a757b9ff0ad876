"""`memsight replay --json` streams (issue 20 item 4): what summarize keeps does not grow with the recording's
length, only with what its document lists (one source per process, agent, device...)."""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

from collectors import recorder
from collectors.errors import CollectorError
from collectors.recorder import Recorder
from collectors.recording import RecordingReader
from collectors.recording_summary import Summary, summarize
from collectors.snapshots import DeviceInfo, GpuProcess, NVMLSnapshot, ProcessInfo
from tests.collectors.builders import GiB, os_snapshot
from tests.collectors.test_recording_format import _record as _agent_record
from tests.collectors.test_recording_format import _write_and_read
from tests.fuzz import mutate


def _table(tick: int) -> tuple[ProcessInfo, ...]:
    """Four processes, one of them a page bigger or smaller at every tick: a table change per event."""
    return tuple(
        ProcessInfo(pid=100 + i, name="python", cmdline=f"python job{i}.py", user="ada",
                    rss=(2000 - i) * 2**20 + (tick % 7 if i == tick % 4 else 0) * 4096, growth_bytes=0,
                    is_new=False, start_ticks=5 + i, growth_window_s=30.0)
        for i in range(4)
    )  # fmt: skip


def _record(path, ticks: int, times=None) -> None:
    rec = Recorder(path, hz=2.0)
    for tick in range(ticks):
        t = 1.7e9 + tick / 2 if times is None else times[tick]
        rec.os(os_snapshot(t, 32 * GiB - tick % 5 * 4096, _table(tick)))
    rec.close()


def _peak(path) -> tuple[int, dict]:
    """The most memory summarize held at once (tracemalloc), and its document."""
    tracemalloc.start()
    try:
        with RecordingReader(path) as reader:
            doc = summarize(reader)
        return tracemalloc.get_traced_memory()[1], doc
    finally:
        tracemalloc.stop()


def test_replay_json_holds_the_same_memory_for_a_recording_four_times_as_long(tmp_path):
    """The same processes, the table changing at every event: 1,600 events hold what 400 do (it held three
    machine numbers per table change before: 28 KB more here, 2 MB for the bench's day)."""
    long = tmp_path / "long.jsonl"
    _record(long, 1600)
    lines = long.read_bytes().splitlines(keepends=True)
    os_lines = [i for i, line in enumerate(lines) if line.startswith(b'{"k":"os"')]
    short = tmp_path / "short.jsonl"
    short.write_bytes(b"".join(lines[: os_lines[400]]))  # the first 400 events, the same file's lines
    short_peak, short_doc = _peak(short)
    long_peak, long_doc = _peak(long)
    assert [s["samples"] for s in short_doc["sources"]] == [400] * 5
    assert [s["samples"] for s in long_doc["sources"]] == [1600] * 5
    assert long_peak - short_peak < 8_000, (short_peak, long_peak)


def test_a_process_spans_the_earliest_to_the_latest_time_it_was_seen_when_the_clock_steps_back(tmp_path):
    """A clock stepped back (NTP) while the table stays the same: a process's start and end are still the
    earliest and latest times of the events it was in, as the OS source's are."""
    times = [1.7e9 + x for x in (10.0, 10.5, 11.0, 4.0, 4.5, 30.0, 5.0, 12.0)]
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, hz=2.0)
    for tick, t in enumerate(times):
        rec.os(os_snapshot(t, 32 * GiB, _table(0 if tick < 5 else 1)))  # a change at the sixth event
    rec.close()
    with RecordingReader(path) as reader:
        doc = json.loads(json.dumps(summarize(reader)))
    spans = {s["id"]: (s["start"], s["end"], s["samples"]) for s in doc["sources"]}
    assert spans["os"] == (1.7e9 + 4.0, 1.7e9 + 30.0, 8)
    for i in range(4):
        assert spans[f"process:{100 + i}:{5 + i}"] == (1.7e9 + 4.0, 1.7e9 + 30.0, 8)


def _general(path) -> tuple[dict, tuple]:
    """The document of the general reader's events (RecordingReader.decoded, Summary.event: what summarize
    did before collectors/recording_fast.py), and what the reader skipped."""
    with RecordingReader(path) as reader:
        summary = Summary()
        for event, changed, rows in reader.decoded():
            summary.event(event, changed, rows)
        return summary.document(reader), (reader.bad_lines, reader.first_bad, reader.truncated_tail)


def _fast(path) -> tuple[dict, tuple]:
    with RecordingReader(path) as reader:
        return summarize(reader), (reader.bad_lines, reader.first_bad, reader.truncated_tail)


_HOSTILE = (
    "1e999", "-1e999", "1e999", "-1e999", "9223372036854775809", "-1", "0", "1.5", "9007199254740993", "true",
    "null", '"x"', "[]", "{}", "[1, 2]", "23", "21", "2",
)  # fmt: skip


def _damage_a_value(line: bytes, rnd: random.Random) -> bytes:
    """One value of a change line (a figure, a record's index or value, a process row's, a device's field)
    replaced by a hostile one, removed, or one added beside it (a copy, in a list); the line still JSON
    (1e999: a float too large, which reads as inf)."""
    event = json.loads(line)
    slots = []

    def walk(node):
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            slots.append((node, key))
            if isinstance(value, dict | list):
                walk(value)

    walk(event)
    node, key = rnd.choice(slots)
    op = rnd.randrange(5)
    if op == 0:
        del node[key]
    elif op == 1 and isinstance(node, dict):
        node["x"] = 0
    elif op == 1:
        node.append(node[key])  # a row, a device's change, an index and its value, twice
    else:
        node[key] = "\0HOSTILE\0"
    text = json.dumps(event, separators=(",", ":"))
    return text.replace('"\\u0000HOSTILE\\u0000"', rnd.choice(_HOSTILE)).encode()


def _damaged(data: bytes, rnd: random.Random, case: int) -> bytes:
    """Six of format 2's change lines damaged (_damage_a_value), chosen among the process table's changes,
    the agents', the devices' and the OS figures' alike; then, in every other case, lines damaged, dropped,
    repeated or swapped at random (tests/fuzz/mutate.py)."""
    lines = data.split(b"\n")
    kinds = (b'"pset":', b'"pdel":', b'"d":', b'"dset":', b'{"k":"os"')
    groups = [[i for i, line in enumerate(lines) if kind in line] for kind in kinds]
    for _ in range(6):
        i = rnd.choice(rnd.choice([group for group in groups if group]))
        lines[i] = _damage_a_value(lines[i], rnd)
    damaged = b"\n".join(lines)
    return mutate.mutate_lines(damaged, rnd) if case % 2 else damaged


def test_the_fast_reader_reads_damaged_recordings_as_the_general_reader_does(tmp_path, monkeypatch):
    """Format 2's change lines read by collectors/recording_fast.py give the general reader's document byte
    for byte, and skip the same lines for the same reasons: on a recording of process tables coming and going,
    two agents on three devices and two GPUs (the real Recorder, every stream in full every 5 s), whole and
    with values damaged, and lines damaged, dropped, repeated and swapped (tests/fuzz/mutate.py)."""
    monkeypatch.setattr(recorder, "KEYFRAME_S", 5.0)  # a damaged line costs its stream 5 s: more are read
    seed = tmp_path / "seed.jsonl"
    _write_and_read(seed, ticks=60)
    data = seed.read_bytes()
    rnd = random.Random(2020)
    path = tmp_path / "r.jsonl"
    refused = 0
    for case in range(40):
        path.write_bytes(_damaged(data, rnd, case) if case else data)
        try:
            general, skipped = _general(path)
        except CollectorError:
            with pytest.raises(CollectorError):
                _fast(path)
            continue
        fast, fast_skipped = _fast(path)
        assert json.dumps(fast) == json.dumps(general), case
        assert fast_skipped == skipped, case
        refused += skipped[0] > 0
    assert refused > 30  # the damage reached the readers' checks


def _base(path) -> list[bytes]:
    """Two processes, an agent's record on GPU 0 and a GPU with one process, each written in full."""
    rec = Recorder(path, hz=2.0)
    procs = tuple(ProcessInfo(pid=pid, name="python", cmdline=f"job {pid}", user="ada", rss=pid * 2**20,
                              growth_bytes=None, is_new=False, start_ticks=pid - 95, growth_window_s=30.0)
                  for pid in (100, 101))  # fmt: skip
    rec.os(os_snapshot(1.7e9, 32 * GiB, procs))
    rec.nvml(NVMLSnapshot(status="ok", available=True, t=1.7e9, driver_version="580", devices=(
        DeviceInfo(index=0, name="H100", uuid="GPU-0", total=80 * GiB, reserved=None, used=GiB, free=79 * GiB,
                   unified=False, utilization_gpu=50.0, processes=(GpuProcess(7001, GiB, "compute"),),
                   unsupported=()),)))  # fmt: skip
    record = _agent_record(random.Random(1), 1.7e9, 0, 1)
    rec.agent(7001, 5, "python serve.py", "/tmp/a", 10.0, (record,), "ok", True, 0)
    rec.close()
    return path.read_bytes().splitlines(keepends=True)


T = 1.7e9 + 1
_CHANGES = [  # (a line, then the next change of its stream): read alike, or refused alike
    '{"k":"os","t":T,"mem_available":1,"pset":[[100,5,2048,0]],"pdel":[[101,6]]}',
    '{"k":"os","t":T,"pset":[[101,6,"python",4096,null,0,"ada"]],"pdel":[[101,6]]}',  # gone and back
    '{"k":"os","t":T,"pset":[[201,1,"a",4096,null,1,"u"],[202,1,"b",4096,null,1,"u"],[203,1,"c",8192,1,1,"u",2]]}',
    '{"k":"os","t":T,"pset":[[100,5,1,2],[100,5,3,4]]}',
    '{"k":"os","t":T,"pset":[[100,5,1,2],[100,5,"p",3,null,0,"u"]]}',  # a size, then the whole row
    '{"k":"os","t":T,"pset":[[100,5,"p",3,null,0,"u"],[100,5,1,2],[101,6,7,8]]}',
    '{"k":"os","t":T,"mem_available":1e999}',
    '{"k":"os","t":T,"cached":"x"}',
    '{"k":"os","t":T,"w":null}',
    '{"k":"os","t":T,"pset":[[100,5,"x",0]]}',
    '{"k":"os","t":T,"pset":[[999,5,1,0]]}',
    '{"k":"os","t":T,"pdel":[[999,5]]}',
    '{"k":"os","t":T,"pdel":[[100]]}',
    '{"k":"os","t":T,"pset":null}',
    '{"k":"os","t":T,"pset":[[100,5,"p",1,null,0]]}',
    '{"k":"os","t":-1,"mem_available":1}',
    '{"k":"os","t":T,"procs":[[300,1,"z",1,null,1,"u"],[301,1,"y",9,null,1,"u",3],[100,5,"p",7,0,0,"a"]]}',
    '{"k":"os","t":T,"procs":[[100,5,"p",1,null,0,"u"],[100,5,"p",2,null,0,"u"]]}',
    '{"k":"os","t":T,"procs":[[100,5,"p",1,null,0,"u"]],"pset":[[555,1,2,3]]}',
    '{"k":"os","t":T,"procs":[[100,5,"p","x",null,0,"u"]]}',
    '{"k":"nvml","t":T,"dset":[{"index":0,"used":5},{"index":0,"free":7}]}',
    '{"k":"nvml","t":T,"dset":[{"index":0,"processes":[{"pid":7001,"used_bytes":2,"kind":"compute"},'
    '{"pid":7002,"used_bytes":null,"kind":"graphics"}]}]}',
    '{"k":"nvml","t":T,"dset":[{"index":0,"processes":[{"pid":7001,"used_bytes":2,"kind":"compute","x":1}]}]}',
    '{"k":"nvml","t":T,"dset":[{"index":0,"processes":[{"pid":7001,"kind":"compute"}]}]}',
    '{"k":"nvml","t":T,"dset":[{"index":0,"fan":1}]}',
    '{"k":"nvml","t":T,"dset":[{"index":0.0,"used":1}]}',
    '{"k":"nvml","t":T,"dset":[{"index":3,"used":1}]}',
    '{"k":"nvml","t":T,"dset":[{"index":0,"unsupported":[1]}]}',
    '{"k":"agent","pid":7001,"start":5,"t":T,"dev":0,"d":[3,1.5,4,9007199254740993,5,null,19,null,22,"x"]}',
    '{"k":"agent","pid":7001,"start":5,"t":T,"dev":0,"d":[3,1e999]}',
    '{"k":"agent","pid":7001,"start":5,"t":T,"dev":0,"d":[21,-1e999]}',
    '{"k":"agent","pid":7001,"start":5,"t":T,"dev":0,"d":[22,5]}',
    '{"k":"agent","pid":7001,"start":5,"t":T,"dev":0,"d":[1,5]}',
    '{"k":"agent","pid":7001,"start":5,"t":T,"dev":0,"d":[true,5]}',
    '{"k":"agent","pid":7001,"start":5,"t":T,"dev":0,"d":[3]}',
    '{"k":"agent","pid":7001,"start":5,"t":T,"dev":0,"d":[3,9223372036854775809]}',
    '{"k":"agent","pid":7001,"start":5,"t":T,"dev":1,"d":[3,1]}',
    '{"k":"agent","pid":7001,"start":5,"t":T,"dev":0,"d":[3,1],"sr":9.5}',
]
_NEXT = {
    "os": '{"k":"os","t":T,"mem_available":2,"pset":[[100,5,8,1]]}',
    "nvml": '{"k":"nvml","t":T,"dset":[{"index":0,"used":9}]}',
    "agent": '{"k":"agent","pid":7001,"start":5,"t":T,"dev":0,"d":[3,7,4,9]}',
}


@pytest.mark.parametrize("change", _CHANGES)
def test_each_check_of_the_fast_reader_is_the_general_readers(tmp_path, change):
    """Each value a change line holds, valid or not, read (or refused) as the general reader reads it, and the
    stream's next change after it too."""
    lines = _base(tmp_path / "base.jsonl")
    kind = json.loads(change.replace("T", "1"))["k"]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(lines) + f"{change}\n{_NEXT[kind]}\n".replace("T", repr(T)).encode())
    general, skipped = _general(path)
    fast, fast_skipped = _fast(path)
    assert json.dumps(fast) == json.dumps(general)
    assert fast_skipped == skipped


def test_the_fast_reader_gives_the_general_readers_document_for_the_benchs_recording(tmp_path):
    """bench/day_recording.py's recording (the real Recorder: a 24-process table changing at every scan,
    processes coming and going, an agent, a GPU), 15 minutes of it: the fast reader's document is the general
    reader's byte for byte, across the many folds of the values it appends (_FOLD_EVERY lines apart) and the
    complete lines written every minute."""
    from bench.day_recording import make  # noqa: PLC0415

    path = tmp_path / "day.jsonl"
    made = make(path, 0.25)
    assert made["ticks"] == 1800
    general, skipped = _general(path)
    fast, fast_skipped = _fast(path)
    assert json.dumps(fast) == json.dumps(general)
    assert fast_skipped == skipped == (0, "", False)
    processes = [s for s in fast["sources"] if s["kind"] == "process"]
    assert len(processes) == 24 + 1799 // 40  # and one started at every 40th tick after the first
    assert [s["samples"] for s in fast["sources"] if s["id"] == "os"] == [1800]


def test_the_values_waiting_to_be_folded_do_not_grow_with_a_recording_without_complete_lines(tmp_path):
    """An agent's change lines with no complete line between them (a writer that never writes one again):
    what the fast reader holds for 2,000 of them is what it holds for 500, every value folded in turn."""
    lines = _base(tmp_path / "base.jsonl")

    def write(path, count: int) -> None:
        changes = (
            f'{{"k":"agent","pid":7001,"start":5,"t":{T + i / 2!r},"dev":0,"d":[3,{2**33 + i * 4096},4,'
            f'{2**34 + i * 8192}]}}\n'
            for i in range(count)
        )
        path.write_bytes(b"".join(lines) + "".join(changes).encode())

    short, long = tmp_path / "short.jsonl", tmp_path / "long.jsonl"
    write(short, 500)
    write(long, 2000)
    _peak(short)  # what a first read allocates once (the readers' caches) is not the recording's
    short_peak, short_doc = _peak(short)
    long_peak, long_doc = _peak(long)
    agent = next(s for s in long_doc["sources"] if s["kind"] == "agent")
    assert agent["samples"] == 2001
    allocated = agent["fields"]["allocated"]
    assert (allocated["max"], allocated["last"]) == (2**33 + 1999 * 4096, 2**33 + 1999 * 4096)
    assert long_peak - short_peak < 8_000, (short_peak, long_peak)


def test_an_over_long_last_line_after_change_lines_is_a_truncated_tail_for_both_readers(tmp_path):
    """A last line over MAX_RECORDING_LINE (skipped unread) after change lines the fast reader read: the
    recording's tail is cut for the fast reader as for the general one."""
    from planner import limits  # noqa: PLC0415

    lines = _base(tmp_path / "base.jsonl")
    path = tmp_path / "r.jsonl"
    change = _NEXT["os"].replace("T", repr(T))
    path.write_bytes(b"".join(lines) + f"{change}\n".encode() + b"{" + b" " * limits.MAX_RECORDING_LINE)
    general, skipped = _general(path)
    fast, fast_skipped = _fast(path)
    assert json.dumps(fast) == json.dumps(general)
    assert fast_skipped == skipped
    assert skipped[0] == 1 and skipped[2] is True
