"""`memsight replay --json` streams (issue 20 item 4): what summarize keeps does not grow with the recording's
length, only with what its document lists (one source per process, agent, device...)."""

from __future__ import annotations

import json
import tracemalloc

from collectors.recorder import Recorder
from collectors.recording import RecordingReader, summarize
from collectors.snapshots import ProcessInfo
from tests.collectors.builders import GiB, os_snapshot


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
