"""The interactive replay's memory does not grow with the recording's length (issue 20 item 4): a replay keeps
up to MAX_CHECKPOINTS states of its StateBuilder (packed) and RECENT_CHECKPOINTS copies, each with the minute
of states the alert rules look back on, so whatever a kept state holds is held many times over."""

from __future__ import annotations

import gc
import sys
import time
import types

from collectors.recorder import Recorder
from collectors.replay import ReplayMonitor, demo_recording_path
from collectors.snapshots import ProcessInfo
from collectors.state import StateBuilder
from tests.collectors.builders import GiB, os_snapshot

_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _held(root: object) -> int:
    """The bytes of every object reachable from `root` (classes, modules and functions left out)."""
    seen: set[int] = set()
    stack, total = [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SHARED):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def _played(builds: int, rss: int, alert_window_s: float = 60.0) -> StateBuilder:
    """A builder after `builds` builds at 2 Hz, each with a new process of `rss` bytes in the table (over
    1 GiB: a new-process alert at every build, each for another pid); its charts 100 points long."""
    builder = StateBuilder(replay=True, alert_window_s=alert_window_s, history_points=100)
    table: tuple[ProcessInfo, ...] = ()
    for tick in range(builds):
        t = 1.7e9 + tick / 2
        new = ProcessInfo(pid=10_000 + tick, name="python", cmdline="python job.py", user="ada", rss=rss,
                          growth_bytes=None, is_new=True, start_ticks=tick, growth_window_s=0.0)  # fmt: skip
        table = (*table[-3:], new)
        builder.update_os(os_snapshot(t, 48 * GiB, table))
        builder.build(t)
    return builder


def test_the_states_kept_for_the_alert_rules_do_not_hold_the_alerts_raised():
    """240 builds raising 240 alerts hold little more than the alerts themselves over 240 quiet builds.
    Each kept state held the summary's alert list (up to 200) and the last 50 alerts before: 120 of them,
    300 KB."""
    quiet = _played(240, 2**20)
    assert quiet.state.summary.alerts_total == 0
    alerting = _played(240, 2 * GiB)
    assert alerting.state.summary.alerts_total == 240 and len(alerting.state.summary.alerts) == 200
    # the 200 alerts of the summary (an Alert and its message: about 300 bytes each) and the conditions
    # remembered for "one alert per condition" (240 keys, 150 bytes each)
    assert _held(alerting) - _held(quiet) < 120_000, (_held(quiet), _held(alerting))


def test_the_conditions_remembered_for_one_alert_each_do_not_grow_with_the_run():
    """A new process over the threshold at every build: 1,200 builds hold what 300 do (the alert window 5 s,
    so that 300 builds are many windows; both past the 200 alerts the summary keeps and the 50 on screen).
    Every pid stayed remembered before: 135 KB more here."""
    short, long = _played(300, 2 * GiB, 5.0), _played(1200, 2 * GiB, 5.0)
    assert long.state.summary.alerts_total == 1200
    assert abs(_held(long) - _held(short)) < 10_000, (_held(short), _held(long))


def test_replayed_states_share_the_processes_that_did_not_change(tmp_path):
    """Each OS event's table becomes ProcessInfo objects; one that is the same as at the event before is that
    object (every field, of the same type), so the minute of states each checkpoint keeps holds a process
    once until it changes. It was made again at every event: 120 copies of the table per checkpoint."""
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, hz=2.0)
    for tick in range(2):  # the third process a page bigger at the second event
        rss = [2 * GiB, 2 * GiB, 2 * GiB + 4096 * tick]
        table = tuple(
            ProcessInfo(pid=100 + i, name="python", cmdline=f"python job{i}.py", user="ada", rss=rss[i],
                        growth_bytes=0, is_new=False, start_ticks=5 + i, growth_window_s=30.0)
            for i in range(3)
        )  # fmt: skip
        rec.os(os_snapshot(1.7e9 + tick / 2, 32 * GiB, table))
    rec.close()
    replay = ReplayMonitor(path)
    tables = replay.advance_to(0.0).os.processes, replay.step().os.processes
    by_pid = [{p.pid: p for p in table} for table in tables]
    assert by_pid[1][100] is by_pid[0][100] and by_pid[1][101] is by_pid[0][101]
    assert by_pid[1][102] is not by_pid[0][102] and by_pid[1][102].rss == 2 * GiB + 4096
    replay.close()


def test_the_screen_asks_whether_the_replay_ended_while_it_plays(tmp_path):
    """The app asks `at_end` from its own thread at every refresh while the player thread reads on; both read
    the file, and `at_end` read without the player's lock: "ValueError: generator already executing" ended a
    replay of the bench's 6 h recording at 64x after a few minutes (found by playing it in tmux)."""
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, hz=2.0)
    table = tuple(_table_row(pid) for pid in range(100, 124))
    for tick in range(2000):
        rec.os(os_snapshot(1.7e9 + tick / 2, 32 * GiB - tick % 7 * 4096, table[tick % 3 :]))
    rec.close()
    replay = ReplayMonitor(path, speed=64.0).start()
    try:
        deadline = time.monotonic() + 2.5  # a race: it failed 2 runs in 3 within 1.5 s
        while time.monotonic() < deadline:
            replay.at_end  # noqa: B018  (what the app asks)
        assert replay.bad_events == 0, replay.first_bad_event
    finally:
        replay.close()


def _table_row(pid: int) -> ProcessInfo:
    return ProcessInfo(pid=pid, name="python", cmdline=f"python job{pid}.py", user="ada", rss=pid * 2**20,
                       growth_bytes=0, is_new=False, start_ticks=pid, growth_window_s=30.0)  # fmt: skip


def test_the_long_kept_checkpoints_are_packed_in_a_fraction_of_a_builders_memory():
    """The checkpoints kept for seeks far back are the builder pickled and compressed (state.pack): the
    bundled recording's, at its end, nearly a thirtieth of what the builder holds. Each was a copy of the
    builder, pinning its own 600-record agent histories, charts and minute of states: 1 MiB each, 32 of
    them, in a day's replay (bench/replay_app_memory.py: the app 94 MiB after 5 hours, 64 with them packed).
    The last few stay objects: a short seek back costs no unpacking."""
    replay = ReplayMonitor(demo_recording_path())
    replay.seek(replay.duration_s)
    packed = [c.held for c in replay._checkpoints]
    assert len(packed) == 3 and all(isinstance(held, bytes) for held in packed)
    assert all(isinstance(c.held, tuple) for c in replay._recent)
    assert max(map(len, packed)) * 10 < _held(replay.builder)
    replay.close()


def test_playing_keeps_only_the_os_times_still_to_come():
    """The times of the OS events read ahead (step() and seeks stop at each) were dropped only by step() and
    seeks: played in real time (advance_to), every OS event's time stayed, two a second of recording (a
    day: 172,800 floats, 4 MiB, and again in each checkpoint)."""
    replay = ReplayMonitor(demo_recording_path())
    offset = 0.0
    while offset < replay.duration_s / 2:
        offset += 0.5
        replay.advance_to(offset)
    pending = list(replay._os_times)
    assert pending and all(t > replay.position_t for t in pending)
    assert max(pending) <= replay._read_t  # read ahead by the reorder window only
    replay.close()
