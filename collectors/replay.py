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

from collectors.alerts import AlertOptions
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


def bundled_recording() -> pathlib.Path:
    """Alias of demo_recording_path() (the name tui/cmd_watch.py uses)."""
    return demo_recording_path()


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
        self.bad_events = 0  # events the readers refused while playing (counted, skipped, shown on screen)
        self.first_bad_event = ""
        self._reset()

    def _reset(self) -> None:
        self.builder = StateBuilder(replay=True, alert_options=self.alert_options)
        self.builder.status["agents"] = "replay"
        self._show_bad()

    def _show_bad(self) -> None:
        """The counted warning on screen: lines skipped on reading, events refused while playing."""
        parts = []
        if self.recording.bad_lines:
            parts.append(f"skipped {self.recording.bad_lines} bad line(s) ({self.recording.first_bad})")
        if self.bad_events:
            parts.append(f"skipped {self.bad_events} bad event(s) ({self.first_bad_event})")
        if parts:
            self.builder.input_warnings["replay"] = "recording: " + "; ".join(parts)
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
        """Feed one event; True if it changes what the UI shows. An event the builder cannot use is counted
        and skipped (shown on screen), so one bad event never stops the replay thread."""
        try:
            return self._apply_one(e)
        except Exception as exc:  # read_recording checked the fields; this is the last line of defence
            self.bad_events += 1
            self.first_bad_event = self.first_bad_event or f"{e.get('k')!s:.20} event: {type(exc).__name__}"
            self._show_bad()
            return True

    def _apply_one(self, e: dict) -> bool:
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
        return self._advance(target)

    def _advance(self, target: float) -> MonitorState:
        """Apply every event up to the absolute time `target` (never backwards)."""
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
                # the absolute time, not start + (t - start): that can round below t, and the step then
                # never reached the event (found by the fuzz suite: step() spun forever)
                return self._advance(_event_time(e))
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
            try:
                self.advance_to(min(offset, self.duration_s))
            except Exception as exc:  # never let the view freeze silently: count it, skip the event, go on
                self.bad_events += 1
                self.first_bad_event = self.first_bad_event or f"{type(exc).__name__}: {exc}"[:120]
                self._show_bad()
                self._cursor += 1
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
