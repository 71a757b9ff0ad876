"""Once scan() has walked a recording (the replay keys a and p start it), the checkpoints its walker kept are
an index: a seek ahead starts from the latest of them at or before the target instead of building a state at
every recorded tick from where the replay is (issue 20: seek by an index built on the way), and lands on the
state a walk from the start reaches."""

from __future__ import annotations

import pytest

from collectors import replay as replay_mod
from collectors.replay import ReplayMonitor, demo_recording_path
from collectors.state import unpack
from tests.collectors.replay_fingerprint import digest
from tests.collectors.test_proc_declarations import record


def on_entry_recording(tmp_path):
    path = tmp_path / "r.jsonl"
    record(path)
    return path


@pytest.mark.parametrize("played", [False, True], ids=["stepped", "played from its first tick"])
@pytest.mark.parametrize("made", ["demo (each process declared once)", "declared on entry"])
def test_seeks_ahead_after_a_scan_start_from_its_index_and_land_exactly(made, played, tmp_path, monkeypatch):
    """`played`: as the app opens a replay (start() advances to the first tick before playing), else seeking
    from a freshly opened one: both build the state at the first tick on the way, as scan's walker does."""
    monkeypatch.setattr(replay_mod, "MAX_CHECKPOINTS", 5)
    monkeypatch.setattr(replay_mod, "CHECKPOINT_S", 4.0)
    path = demo_recording_path() if made.startswith("demo") else on_entry_recording(tmp_path)
    replay = ReplayMonitor(path)
    walked = ReplayMonitor(path, seekable=False)  # no checkpoint, no index: every seek walks
    if played:
        replay.advance_to(0.0)
        walked.advance_to(0.0)
    restored = []
    monkeypatch.setattr(replay_mod, "unpack", lambda packed: restored.append(packed) or unpack(packed))
    assert replay.scan() is not None
    index = list(replay._ahead)
    assert 3 <= len(index) <= 5 and all(isinstance(c.held, bytes) for c in index)
    duration = replay.duration_s
    past_second = index[1].position_t - replay.start_t + 1.0  # the first seek starts from that checkpoint
    for offset in (past_second, duration * 0.95, duration * 0.5, duration * 0.52, duration):
        before = len(restored)
        replay.seek(offset)
        walked.seek(offset)
        assert digest(replay.state()) == digest(walked.state()), offset
        if offset == past_second:
            assert len(restored) == before + 1
    replay.close()
    walked.close()


def test_without_a_scan_a_seek_ahead_walks_and_keeps_no_index(tmp_path, monkeypatch):
    monkeypatch.setattr(replay_mod, "CHECKPOINT_S", 4.0)
    path = on_entry_recording(tmp_path)
    replay = ReplayMonitor(path)
    restored = []
    monkeypatch.setattr(replay_mod, "unpack", lambda packed: restored.append(packed) or unpack(packed))
    replay.seek(replay.duration_s * 0.8)
    assert not restored and not replay._ahead
    walker = ReplayMonitor(path, seekable=False)  # scan's: neither recent checkpoints nor an index
    walker.seek(walker.duration_s)
    assert not walker._checkpoints and not walker._recent
    replay.close()
    walker.close()


def test_a_state_is_the_same_whichever_way_it_was_reached():
    """Stepping from a freshly opened replay, seeking from one, and playing (start() advances to the first
    tick, then on) build the state at the first tick alike: the history and the summary begin there on every
    way, so a checkpoint made one way serves a seek made another."""
    path = demo_recording_path()
    stepped, sought, played = ReplayMonitor(path), ReplayMonitor(path), ReplayMonitor(path)
    for _ in range(25):
        stepped.step()
    offset = stepped.offset_s
    sought.seek(offset)
    played.advance_to(0.0)
    played.seek(offset)
    assert digest(stepped.state()) == digest(sought.state()) == digest(played.state())
    assert stepped.state().summary.start_t == stepped.start_t  # the first sample counted
    for replay in (stepped, sought, played):
        replay.close()
