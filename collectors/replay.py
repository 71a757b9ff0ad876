"""Plays a recording back with the Monitor's interface: start() / stop() / state().

The recorded OS, NVML and agent snapshots are fed, in time order, into the same StateBuilder the live
monitor uses, so the UI sees the same MonitorState (with replay=True). `start()` plays in real time
(times `speed`); tests step with `advance_to(offset_s)` / `step()` and check `at_end`.
While it plays, the UI's controls (pause, seek, speed, jump to the next alert or to the peak) act on the
same clock under one lock; alert and peak times come from one scan of the whole recording (scan()), with
the thresholds this replay uses, so a jump lands where the screen will show the alert.
"""

from __future__ import annotations

import os
import pathlib
import threading
import time

from collectors.agent_info import parse_info
from collectors.agent_reader import skipped_files_line
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
from collectors.summary import RunSummary

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
        recording: Recording | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.alert_options = alert_options  # kept: every _reset() (seek back, loop) builds a fresh builder
        # `recording`: one already read from path (scan() walks it again without re-reading the file)
        self.recording: Recording = recording if recording is not None else read_recording(self.path)
        self.speed = speed
        self.loop = loop
        self._events = sorted(self.recording.events, key=_event_time)  # declarations (t 0) come first
        times = [_event_time(e) for e in self._events if _event_time(e) > 0]
        self.start_t = min(times) if times else 0.0
        self.end_t = max(times) if times else 0.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the player thread and the UI's controls move the same cursor
        self.paused = False
        self._base = 0.0  # offset (s) at _began; the play clock is _base + (now - _began) * speed
        self._began = time.monotonic()
        self._scan: RunSummary | None = None
        # a `memsight run` recording: the command's own agents, as the run counted them (RunChild.family
        # decides each pid once, so the union is each pid's one decision); None: every agent (watch)
        scopes = [e for e in self._events if e["k"] == "scope"]
        self.own: frozenset[int] | None = (
            frozenset(p for e in scopes for p in e["own"]) if scopes else None
        )
        self.bad_events = 0  # events the readers refused while playing (counted, skipped, shown on screen)
        self.first_bad_event = ""
        self._reset()

    def _reset(self) -> None:
        self.builder = StateBuilder(replay=True, alert_options=self.alert_options)
        own = self.own
        if own is not None:
            self.builder.scope = lambda pids: pids & own  # the chart's sums and the summary, as recorded
        self.builder.status["agents"] = "replay"
        self._cursor = 0
        self._cmdlines: dict[tuple[int, int], str] = {}
        self._skipped: dict[str, str] = {}  # agent files the recorded monitor did not read, path -> why
        self.position_t = self.start_t
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
        elif k == "skip" and e["source"] == "agents":  # said as the live monitor said it
            self._skipped[e["path"]] = e["reason"]
            b.input_warnings["agents"] = skipped_files_line(self._skipped)
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
        with self._lock:
            self.advance_to(0.0)
            self._rebase(0.0)
        self._thread = threading.Thread(target=self._play, name="memsight-replay", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    @property
    def offset_s(self) -> float:
        """Where the play clock is now, seconds from the recording's start (where the cursor is, when
        the player is not running: tests stepping by hand)."""
        if self._thread is None:
            return max(0.0, min(self.position_t - self.start_t, self.duration_s))
        if self.paused:
            return self._base
        return min(self._base + (time.monotonic() - self._began) * self.speed, self.duration_s)

    def _rebase(self, offset: float) -> None:
        self._base = max(0.0, min(offset, self.duration_s))
        self._began = time.monotonic()

    def _play(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                if self.paused:
                    continue
                try:
                    self.advance_to(self.offset_s)
                except Exception as exc:  # never let the view freeze silently: count it, skip, go on
                    self.bad_events += 1
                    self.first_bad_event = self.first_bad_event or f"{type(exc).__name__}: {exc}"[:120]
                    self._show_bad()
                    self._cursor += 1
                if self.at_end and self.loop:
                    self._reset()
                    self._rebase(0.0)
                # at the end (no --loop) the thread idles: a seek back plays on

    # ---- controls (the app's replay keys)
    def toggle_pause(self) -> bool:
        """Pause or resume; True when now paused."""
        with self._lock:
            self._rebase(self.offset_s)
            self.paused = not self.paused
            return self.paused

    def set_speed(self, speed: float) -> float:
        """A new speed from the current position on (clamped to 1/16..64)."""
        with self._lock:
            self._rebase(self.offset_s)
            self.speed = max(1 / 16, min(64.0, speed))
            return self.speed

    def seek(self, offset_s: float) -> float:
        """Jump to offset_s (clamped to the recording); the screen shows that moment at once."""
        with self._lock:
            target = max(0.0, min(offset_s, self.duration_s))
            self._walk_to(target)
            self._rebase(target)
            return target

    def _walk_to(self, offset_s: float) -> None:
        """advance_to(offset_s), building a state at every recorded OS tick on the way (as playing does), so
        the alerts and the charts after a seek are the ones playing to that point would have shown."""
        target = self.start_t + offset_s
        if target < self.position_t:
            self._reset()
        i = self._cursor
        while i < len(self._events):
            e = self._events[i]
            t = _event_time(e)
            if t > target:
                break
            if e["k"] == "os" and t > self.position_t:
                self._advance(t)  # absolute: start + (t - start) can round below t (see step)
                i = self._cursor
                continue
            i += 1
        self.advance_to(offset_s)

    def scan(self) -> RunSummary | None:
        """The whole recording's summary (peaks, lowest headroom, every alert, with this replay's
        thresholds), from one pass over it with a builder of its own; computed once."""
        if self._scan is None:
            walker = ReplayMonitor(self.path, alert_options=self.alert_options, recording=self.recording)
            while not walker.at_end:
                walker.step()  # one build per recorded OS tick, as the screen sees them
            self._scan = walker.state().summary
        return self._scan

    def next_alert_offset(self) -> float | None:
        """Offset of the first alert after the current position (None when there is none)."""
        summary = self.scan()
        if summary is None:
            return None
        now = self.offset_s
        for alert in summary.alerts:
            offset = alert.t - self.start_t
            if offset > now + 0.05:
                return offset
        return None

    def peak_offset(self) -> tuple[float, str] | None:
        """(offset, what) of the peak: the most PyTorch reserved, else allocated, else system memory used."""
        summary = self.scan()
        if summary is None:
            return None
        choices = (("reserved", "reserved"), ("allocated", "allocated"), ("system_used", "system used"))
        for key, what in choices:
            peak = summary.peak(key)
            if peak is not None:
                return peak.t - self.start_t, f"peak {what}"
        return None


def _event_time(e: dict) -> float:
    t = e.get("t")
    if t is None and e["k"] == "agent":
        t = e["r"][0]
    return float(t) if t is not None else 0.0
