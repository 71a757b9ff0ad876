"""A recording declares a process (its command line) each time it enters the table, so neither the writer nor
the interactive replay keeps every process a day has seen (issue 20: memory that does not grow with the
recording's length); recordings written before that declared each process once and still replay exactly."""

from __future__ import annotations

import json

from collectors import replay as replay_mod
from collectors.recorder import PROC_LINES_ON_ENTRY, Recorder
from collectors.replay import ReplayMonitor
from collectors.snapshots import ProcessInfo
from tests.collectors.builders import GiB, os_snapshot
from tests.collectors.replay_fingerprint import digest

T0 = 1_700_000_000.0
TICKS = 400  # 2 Hz: 200 s


def process(pid: int, start: int, cmdline: str, rss: int) -> ProcessInfo:
    return ProcessInfo(pid=pid, name=cmdline.split()[0], cmdline=cmdline, user="me", rss=rss,
                       growth_bytes=None, is_new=False, start_ticks=start)  # fmt: skip


def tables() -> list[tuple[ProcessInfo, ...]]:
    """The server stays; a trainer, started again every 30 s with the next epoch, drops out of the table now
    and then (a top-N table) and comes back; a short job starts and ends every 2 s, each one never seen
    before."""
    server = process(100, 1, "vllm serve llama", 40 * GiB)
    out = []
    for tick in range(TICKS):
        epoch = tick // 60
        trainer = process(200 + epoch, 2 + epoch, f"python train.py --epoch {epoch}", 8 * GiB)
        job = process(1000 + tick // 4, 10 + tick // 4, f"bash job-{tick // 4}.sh", GiB)
        out.append((server, job) if tick % 50 >= 40 else (server, trainer, job))
    return out


def entries(all_tables) -> list[tuple[int, str]]:
    """(pid, cmdline) of each process each time it enters a table (is in it and not in the one before)."""
    out, before = [], set()
    for table in all_tables:
        out.extend((p.pid, p.cmdline) for p in table if (p.pid, p.start_ticks) not in before)
        before = {(p.pid, p.start_ticks) for p in table}
    return out


def record(path) -> list:
    rec = Recorder(path, hz=2.0)
    given = []
    for tick, table in enumerate(tables()):
        snap = os_snapshot(T0 + tick * 0.5, 30 * GiB + tick * 2**20, table)
        rec.os(snap)
        given.append(snap)
        assert len(rec._declared_procs) == len(table)  # the last table's processes, not every one seen
    rec.close()
    return given


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_process_is_declared_each_time_it_enters_the_table(tmp_path):
    path = tmp_path / "r.jsonl"
    record(path)
    events = lines(path)
    assert events[0]["proc_lines"] == PROC_LINES_ON_ENTRY
    declared = [(e["pid"], e["cmdline"]) for e in events if e["k"] == "proc"]
    assert declared == entries(tables())
    trainers = [cmdline for pid, cmdline in declared if cmdline.startswith("python train.py")]
    assert trainers.count("python train.py --epoch 0") == 2  # back after its absence at 20 s
    assert declared.count((100, "vllm serve llama")) == 1
    assert len({pid for pid, _ in declared if pid >= 1000}) == TICKS // 4  # each job once
    # each declaration comes right before the OS line whose table it enters
    for i, e in enumerate(events):
        if e["k"] == "proc":
            nxt = next(x for x in events[i + 1 :] if x["k"] != "proc")
            assert nxt["k"] == "os"


def test_replay_shows_every_table_with_its_command_lines_and_keeps_only_the_current_ones(tmp_path):
    path = tmp_path / "r.jsonl"
    given = record(path)
    replay = ReplayMonitor(path)
    shown = []  # a step goes to the next OS tick: the first is applied with the second
    kept = 0
    while not replay.at_end:
        state = replay.step()
        shown.append(state.os)
        # what the replay holds per process: the last table's, and the lines declared for the next one
        kept = max(kept, len(replay._processes) + len(replay._entering) + len(replay._cmdlines))
    assert {s.t: s.processes for s in shown} == {s.t: s.processes for s in given[1:]}  # every cmdline
    assert kept <= 3  # the current table's, not the 100 jobs and the server and trainer seen so far
    replay.close()


def test_seeking_back_restores_the_command_lines_of_the_table_it_lands_on(tmp_path, monkeypatch):
    """Checkpoints (packed and recent) carry the tables' command lines: a seek anywhere gives the state a
    walk from the start gives."""
    monkeypatch.setattr(replay_mod, "MAX_CHECKPOINTS", 5)
    monkeypatch.setattr(replay_mod, "CHECKPOINT_S", 10.0)
    path = tmp_path / "r.jsonl"
    record(path)
    replay = ReplayMonitor(path)
    walked = ReplayMonitor(path, seekable=False)
    # 165 s and 85 s: after a checkpoint (thinned to every 40 s) that holds a trainer the later table lacks
    for offset in (199.5, 165.0, 21.0, 150.2, 149.0, 22.5, 0.0, 120.0, 199.5, 60.3, 85.0, 45.5):
        replay.seek(offset)
        walked.seek(offset)
        assert replay.state().os.processes == walked.state().os.processes, offset
        assert digest(replay.state()) == digest(walked.state()), offset
    assert replay._checkpoints and replay._recent
    replay.close()
    walked.close()


def test_a_recording_that_declared_each_process_once_still_replays_exactly(tmp_path):
    """Before "proc_lines": a process coming back into the table was not declared again: the replay keeps
    every command line it was given."""
    path = tmp_path / "r.jsonl"
    given = record(path)
    old, seen = [], set()
    for e in lines(path):
        if e["k"] == "header":
            del e["proc_lines"]
        if e["k"] == "proc":
            if (e["pid"], e["start"]) in seen:
                continue
            seen.add((e["pid"], e["start"]))
        old.append(json.dumps(e))
    old_path = tmp_path / "old.jsonl"
    old_path.write_text("\n".join(old) + "\n")
    replay = ReplayMonitor(old_path)
    shown = []
    while not replay.at_end:
        shown.append(replay.step().os)
    assert {s.t: s.processes for s in shown} == {s.t: s.processes for s in given[1:]}
    assert len(replay._cmdlines) == 1 + (TICKS - 1) // 60 + 1 + TICKS // 4  # all of them, as before
    replay.close()
