"""Plays a recording back with the Monitor's interface: start() / stop() / state().

The recorded OS, NVML and agent snapshots are fed, in time order, into the same StateBuilder the live
monitor uses, so the UI sees the same MonitorState (with replay=True). `start()` plays in real time
(times `speed`); tests step with `advance_to(offset_s)` / `step()` and check `at_end`.
"""

from __future__ import annotations

import os
import pathlib
import threading
import time

from collectors.agent_info import parse_info
from collectors.alerts import AlertOptions
from collectors.errors import CollectorError
from collectors.recorder import (
    Recording,
    nvml_snapshot_from,
    os_snapshot_from,
    read_recording,
    record_from_values,
    vllm_snapshot_from,
)
from collectors.snapshots import MonitorState
from collectors.state import StateBuilder

DEMO_RECORDING = "demo_cpu_generate.jsonl"


def demo_recording_path() -> pathlib.Path:
    """The bundled real recording `memsight demo` plays (see collectors/data/README.md)."""
    return pathlib.Path(__file__).resolve().parent / "data" / DEMO_RECORDING


# `memsight demo --recording NAME`: the bundled real recordings (collectors/data/README.md)
DEMO_RECORDINGS = {
    "manual": "demo_cpu_generate.jsonl",  # a torch script that calls agent.track_model / track_kv itself
    "transformers": "demo_transformers_generate.jsonl",  # an unmodified transformers script: autotrack
}


def bundled_recording(name: str = "manual") -> pathlib.Path:
    """The bundled recording called `name` (DEMO_RECORDINGS); "manual" is demo_recording_path()."""
    return pathlib.Path(__file__).resolve().parent / "data" / DEMO_RECORDINGS[name]


class ReplayMonitor:
    def __init__(
        self,
        path: str | os.PathLike,
        speed: float = 1.0,
        loop: bool = False,
        alert_options: AlertOptions | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.alert_options = alert_options  # kept: every _reset() (seek back, loop) builds a fresh builder
        self.recording: Recording = read_recording(self.path)
        self.speed = speed
        self.loop = loop
        self._events = sorted(self.recording.events, key=_event_time)  # declarations (t 0) come first
        times = [_event_time(e) for e in self._events if _event_time(e) > 0]
        self.start_t = min(times) if times else 0.0
        self.end_t = max(times) if times else 0.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._reset()

    def _reset(self) -> None:
        self.builder = StateBuilder(replay=True, alert_options=self.alert_options)
        self.builder.status["agents"] = "replay"
        self._cursor = 0
        self._cmdlines: dict[tuple[int, int], str] = {}
        self.position_t = self.start_t

    def describe(self) -> str:
        """One line for the UI: which file, how long, made where."""
        host = self.recording.header.get("host") or "unknown host"
        created = self.recording.header.get("created")
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(created)) if created else "unknown date"
        return f"{os.path.basename(self.path)} ({self.duration_s:.0f} s, recorded on {host}, {when})"

    @property
    def duration_s(self) -> float:
        return self.end_t - self.start_t

    @property
    def at_end(self) -> bool:
        return self._cursor >= len(self._events)

    def state(self) -> MonitorState:
        return self.builder.state

    def _apply(self, e: dict) -> bool:
        """Feed one event; True if it changes what the UI shows."""
        k = e["k"]
        b = self.builder
        if k == "proc":
            self._cmdlines[(e["pid"], e["start"])] = e.get("cmdline", "")
            return False
        if k == "os":
            b.update_os(os_snapshot_from(e, self._cmdlines))
        elif k == "nvml":
            b.update_nvml(nvml_snapshot_from(e))
        elif k == "vllm":
            b.update_vllm(vllm_snapshot_from(e))
        elif k == "agent_meta":
            b.agent_track(e["pid"], e["start"], e.get("cmdline", ""), e.get("path", ""), e.get("hz", 0.0))
            return False
        elif k == "agent_info":
            key = (e["pid"], e["start"])
            if key not in b.agents:
                b.agent_track(e["pid"], e["start"], "", "", 0.0)
            try:
                b.update_agent_info(key, parse_info(e.get("info"), f"recorded agent info of pid {e['pid']}"))
            except CollectorError:
                return False  # a malformed entry: the last good one stays
        elif k == "agent":
            key = (e["pid"], e["start"])
            if key not in b.agents:
                b.agent_track(e["pid"], e["start"], "", "", 0.0)
            status = e.get("status")
            b.update_agent(
                key,
                (record_from_values(e["r"]),),
                status=status if status in ("exited", "pid reused", "stale") else None,
                alive=e.get("alive"),
                lost=0,
            )
            if e.get("lost"):
                b.agents[key].lost = e["lost"]
        else:
            return False
        return True

    def advance_to(self, offset_s: float) -> MonitorState:
        """Apply every event up to start + offset_s (seeking backwards replays from the start)."""
        target = self.start_t + offset_s
        if target < self.position_t:
            self._reset()
        changed = False
        while self._cursor < len(self._events) and _event_time(self._events[self._cursor]) <= target:
            changed |= self._apply(self._events[self._cursor])
            self._cursor += 1
        self.position_t = target
        if changed or self.builder.state.t == 0.0:
            self.builder.build(min(target, self.end_t) if self._events else target)
        return self.state()

    def step(self) -> MonitorState:
        """Advance to the next OS sample (one recorded tick)."""
        while self._cursor < len(self._events):
            e = self._events[self._cursor]
            if e["k"] == "os" and _event_time(e) > self.position_t:
                return self.advance_to(_event_time(e) - self.start_t)
            self._apply(e)
            self._cursor += 1
        self.builder.build(self.end_t)
        return self.state()

    # ---- real-time playback
    def start(self) -> ReplayMonitor:
        if self._thread is not None:
            return self
        self._stop.clear()
        self.advance_to(0.0)
        self._thread = threading.Thread(target=self._play, name="memsight-replay", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    def _play(self) -> None:
        began = time.monotonic()
        base = self.position_t - self.start_t
        while not self._stop.wait(0.1):
            offset = base + (time.monotonic() - began) * self.speed
            self.advance_to(min(offset, self.duration_s))
            if self.at_end:
                if not self.loop:
                    return
                self._reset()
                began, base = time.monotonic(), 0.0


def _event_time(e: dict) -> float:
    t = e.get("t")
    if t is None and e["k"] == "agent":
        t = e["r"][0]
    return float(t) if t is not None else 0.0
