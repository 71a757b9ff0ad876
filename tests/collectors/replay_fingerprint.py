"""A canonical, hashable picture of what a replay produces, to prove old recordings replay identically.

`golden(path)` steps a ReplayMonitor through a recording (every recorded OS tick, then a few seeks as the
interactive replay does) and summarizes it as `memsight replay --json` does; each MonitorState becomes a
sha256 of its canonical JSON. tests/data/recordings/v1_golden.json holds what the format-1 reader (commit
5854ddd, the last before format 2) produced for the format-1 recordings. Regenerated once since, on purpose,
when a step or a seek from the start began to build the first tick's state as playing does (issue 20: the
replay's seek index): the new file's every entry was checked equal to what the code before that change gave
with the first tick built first (advance_to(0) before the steps and in scan's walker), its `advance_to` and
`summarize` entries unchanged. Regenerated again when MonitorState began to carry the headroom's total
(headroom_total_bytes, from collectors/state.py headroom_of): every entry was checked equal to the file before
with that field left out of each state's picture; only state digests changed. Regenerate only on purpose:

    .venv/bin/python -m tests.collectors.replay_fingerprint --write
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pathlib
import sys
from types import MappingProxyType

from collectors.replay import DEMO_RECORDINGS

REPO = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "recordings" / "v1_golden.json"
V1_RECORDINGS = {
    **{name: REPO / "collectors" / "data" / file for name, file in DEMO_RECORDINGS.items()},
    "run_two_agents": REPO / "tests" / "data" / "recordings" / "v1_run_two_agents.jsonl",
}


def canonical(obj):
    """JSON-able, independent of object identity; a dataclass field still at its default is left out, so a
    field added later with a default does not change the picture of a state that does not use it."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.default is not dataclasses.MISSING and _same(value, f.default):
                continue
            if f.default_factory is not dataclasses.MISSING and _same(value, f.default_factory()):
                continue
            out[f.name] = canonical(value)
        return out
    if isinstance(obj, (dict, MappingProxyType)):
        return {str(k): canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [canonical(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(canonical(v) for v in obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    return obj


def _same(a, b) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return False


def digest(state) -> str:
    text = json.dumps(canonical(state), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def golden(path: pathlib.Path) -> dict:
    from collectors.recording import read_recording
    from collectors.recording_summary import summarize
    from collectors.replay import ReplayMonitor
    from collectors.summary import summary_to_json

    doc = summarize(read_recording(path))
    replay = ReplayMonitor(path)
    steps = []
    while not replay.at_end:
        steps.append(digest(replay.step()))
    duration = replay.duration_s
    seeks = {}
    for offset in (duration, duration / 2, 1.3, 0.0, duration * 0.75):
        replay.seek(offset)
        seeks[f"{offset / duration:.2f}"] = digest(replay.state())
    played = {}
    other = ReplayMonitor(path)
    for offset in (0.0, 0.7, duration / 3, duration / 3 + 0.25, duration):
        played[f"{offset:.2f}"] = digest(other.advance_to(offset))
    scan = ReplayMonitor(path).scan()
    return {
        "summarize": doc,
        "duration_s": duration,
        "steps": steps,
        "seeks": seeks,
        "advance_to": played,
        "scan": summary_to_json(scan) if scan is not None else None,
    }


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(__doc__)
    GOLDEN.write_text(json.dumps({name: golden(p) for name, p in V1_RECORDINGS.items()}, indent=1) + "\n")
    print(f"wrote {GOLDEN}")
