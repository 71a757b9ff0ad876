"""Plays a recording back with the Monitor's interface: start() / stop() / state().

The recorded OS, NVML and agent snapshots are fed, in time order, into the same StateBuilder the live
monitor uses, so the UI sees the same MonitorState (with replay=True). `start()` plays in real time
(times `speed`); tests step with `advance_to(offset_s)` / `step()` and check `at_end`.

The file is read as it plays, in one pass (collectors/recording.py RecordingReader), so memory does not grow
with its length: the lines are in the order they were written, a sample's time at most a few seconds off
that order (an agent's record is read at the monitor's next tick), so events wait in a small heap until
nothing earlier can come (REORDER_S) and are applied in time order. Declarations (a process's command line,
an agent's start, which agents are this run's) are applied as they are read. Seeking back restarts from the
nearest checkpoint (Checkpoints: the reader's position and the builder, kept every CHECKPOINT_S on the way,
at most MAX_CHECKPOINTS of them) and plays forward from there. Once scan() has walked the whole recording,
the checkpoints its walker kept on the way are an index: a seek ahead starts from the latest of them before
its target instead of building a state at every recorded tick on the way.
While it plays, the UI's controls (pause, seek, speed, jump to the next alert or to the peak) act on the
same clock under one lock; alert and peak times come from one scan of the whole recording (scan()), with
the thresholds this replay uses, so a jump lands where the screen will show the alert.
"""

from __future__ import annotations

import heapq
import math
import os
import pathlib
import threading
import time
from collections import deque
from dataclasses import dataclass

from collectors.agent_info import parse_info
from collectors.agent_reader import skipped_files_line
from collectors.alerts import AlertOptions
from collectors.errors import CollectorError
from collectors.pool import pool_detail_from
from collectors.recorder import PROC_LINES_ON_ENTRY, record_from_values
from collectors.recording import ReaderPosition, RecordingReader
from collectors.recording_checks import check_event
from collectors.recording_snapshots import nvml_snapshot_from, os_snapshot_from, vllm_snapshot_from
from collectors.snapshots import MonitorState
from collectors.state import StateBuilder, unpack
from collectors.summary import RunSummary
from planner import limits

DEMO_RECORDING = "demo_cpu_generate.jsonl"
# Events whose times are further apart than this from the order they were written in are applied late, at
# once (never dropped). A monitor writes a sample at most one tick (and an agent's kept record at most
# one tick more) after its time; 10 s covers a 0.2 Hz monitor.
REORDER_S = 10.0
TAIL_BYTES = 256 * 1024  # read from the end of the file for its last time (duration_s)
CHECKPOINT_S = 60.0  # a checkpoint every this much recording time played, doubled whenever there are
MAX_CHECKPOINTS = 32  # more than this many (every other one dropped): memory bounded whatever the length
RECENT_CHECKPOINT_S = 20.0  # and the last RECENT_CHECKPOINTS this far apart, for short seeks back (← 10 s)
RECENT_CHECKPOINTS = 3
# kinds the replay applies as soon as it reads them (no time, or a declaration of what follows)
DECLARATIONS = frozenset({"proc", "agent_meta", "scope"})


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
        *,
        seekable: bool = True,
        index: bool = False,
    ) -> None:
        """`seekable=False`: played forward only (scan's walker), so no checkpoints are kept for seeks back;
        with `index=True` the long-kept (packed) ones are, for the replay that scans to seek ahead with."""
        self.path = os.fspath(path)
        self.alert_options = alert_options  # kept: every _reset() (seek back, loop) builds a fresh builder
        self.speed = speed
        self.loop = loop
        self.seekable = seekable
        self.index = index
        self._reader = RecordingReader(self.path)
        self.header = self._reader.header
        self._data_at = self._reader.position()  # the first line after the header
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # the player thread and the UI's controls and questions (at_end) move the same cursor; reentrant: the
        # player asks at_end while it holds it
        self._lock = threading.RLock()
        self.paused = False
        self._base = 0.0  # offset (s) at _began; the play clock is _base + (now - _began) * speed
        self._began = time.monotonic()
        self._scan: RunSummary | None = None
        self._scan_thread: threading.Thread | None = None  # scan_progress(): scan() on a thread of its own
        self._scan_stop = threading.Event()
        self._scan_read = 0.0  # the share of the recording that thread has read
        self._scan_failed: Exception | None = None
        self.bad_events = 0  # events the readers refused while playing (counted, skipped, shown on screen)
        self.first_bad_event = ""
        self.start_t = 0.0
        self.end_t = tail_time(self.path, self._data_at.offset, self._reader.version)
        self._checkpoints: list[_Checkpoint] = []
        self._checkpoint_every = CHECKPOINT_S
        self._recent: deque[_Checkpoint] = deque(maxlen=RECENT_CHECKPOINTS)
        self._ahead: list[_Checkpoint] = []  # scan()'s walker's checkpoints: seeks ahead start from them
        # A recording that declares a process each time it enters the table (PROC_LINES_ON_ENTRY) needs the
        # command lines of the table being played alone: those of the last OS event's processes and those
        # declared for the next OS line (each OS event read carries them: so do the checkpoints' heaps).
        # An older one declared each process once: its command lines are all kept, shared by every checkpoint.
        self._on_entry = self.header.get("proc_lines") == PROC_LINES_ON_ENTRY
        self._cmdlines: dict[tuple[int, int], str] = {}  # older recordings': only grows
        self._processes: dict = {}  # the last OS event's processes, shared by the next (os_snapshot_from)
        self._restart()
        self.start_t = self._first_time()
        self.end_t = max(self.end_t, self.start_t)
        self._restart()

    # ---- reading
    def _restart(self) -> None:
        """Back to the first event, with a fresh builder."""
        self._reader.seek(self._data_at)
        self._heap: list[tuple[float, int, dict]] = []
        self._os_times: list[float] = []  # a heap of the OS events' times in _heap
        self._seq = 0
        self._read_t = -math.inf  # the latest time read so far
        self._eof = False
        self._declared = False  # a declaration read since the last build changes what the screen shows
        self._first_built = False  # the state at the first tick is built (_first_tick)
        self._entering: dict[tuple[int, int], str] = {}  # declared for the next OS line read (_on_entry)
        self._processes = {}
        self.own: frozenset[int] | None = None
        self.builder = StateBuilder(replay=True, alert_options=self.alert_options)
        self.builder.status["agents"] = "replay"
        self._skipped: dict[str, str] = {}  # agent files the recorded monitor did not read, path -> why
        self.position_t = self.start_t
        self.bad_events = 0
        self.first_bad_event = ""
        self._show_bad()

    # ---- checkpoints: where a seek back starts from
    def _checkpoint(self) -> None:
        """Keep the whole replay's state as it is now (the builder copied, the reader's place, the events
        waiting): every _checkpoint_every seconds of recording (at most MAX_CHECKPOINTS, spread over what
        was played), and the last few RECENT_CHECKPOINT_S apart."""
        if not (self.seekable or self.index):
            return
        last = self._checkpoints[-1].position_t if self._checkpoints else -math.inf
        recent = self._recent[-1].position_t if self._recent else -math.inf
        due = self.position_t - last >= self._checkpoint_every
        if not due and not self.position_t - recent >= RECENT_CHECKPOINT_S:
            return
        place = (self.position_t, self._reader.position(), self._read_t, self._eof, self._seq, self.own,
                 self.bad_events, self.first_bad_event, dict(self._skipped),
                 dict(self._entering))  # fmt: skip
        if self.seekable:
            held = (self.builder.copy(), list(self._heap), list(self._os_times))
            self._recent.append(_Checkpoint(*place, held))
        if due:
            # kept long: packed (pickled, compressed), about a tenth of the objects' memory (issue 20)
            held = self.builder.packed(self._heap, self._os_times)
            self._checkpoints.append(_Checkpoint(*place, held))
            if len(self._checkpoints) > MAX_CHECKPOINTS:
                self._checkpoints = self._checkpoints[::2]
                self._checkpoint_every *= 2

    def _back_to(self, target: float) -> None:
        """Before playing back to `target`: to the latest checkpoint at or before it (else the start)."""
        before = sorted((c for c in (*self._checkpoints, *self._recent) if c.position_t <= target),
                        key=lambda c: c.position_t)  # fmt: skip
        if not before:
            self._restart()
            return
        self._restore(before[-1])

    def _restore(self, c: _Checkpoint) -> None:
        """The replay as it was at checkpoint `c` (which stays as it is, for the next seek)."""
        self._reader.seek(c.reader)
        if isinstance(c.held, bytes):
            values, heap, os_times = unpack(c.held)
            self.builder = self.builder.restored(values)
        else:
            builder, heap, os_times = c.held
            self.builder = builder.copy()  # the checkpoint stays as it was, for the next seek
        self._heap, self._os_times = list(heap), list(os_times)
        self._read_t, self._eof, self._seq, self._declared = c.read_t, c.eof, c.seq, False
        self.own, self.bad_events, self.first_bad_event = c.own, c.bad_events, c.first_bad_event
        self._skipped = dict(c.skipped)
        self._entering = dict(c.entering)
        last_os = self.builder.os
        self._processes = {} if last_os is None else {(p.pid, p.start_ticks): p for p in last_os.processes}
        own = self.own
        self.builder.scope = None if own is None else (lambda pids: pids & own)
        self.position_t = c.position_t
        self._show_bad()

    def _read_one(self) -> bool:
        """Read the next event into the heap (a declaration: applied); False at the end of the file."""
        event = next(self._reader.events, None)
        if event is None:
            self._eof = True
            self._show_bad()
            return False
        k = event["k"]
        t = event_time(event)
        if k in DECLARATIONS or t <= 0:  # format 1 gave every event without a time the time 0: first
            self._declared |= self._apply(event)
        else:  # alerts and the summary too: no-ops for the builder (it raises its own), but part of the time
            self._seq += 1
            heapq.heappush(self._heap, (t, self._seq, event))
            if k == "os":
                heapq.heappush(self._os_times, t)
                if self._entering:
                    event["entering"], self._entering = self._entering, {}
            self._read_t = max(self._read_t, t)
            self.end_t = max(self.end_t, t)
        return True

    def _settled(self) -> bool:
        """True when nothing earlier than the heap's first event can still be read."""
        return self._eof or (bool(self._heap) and self._read_t >= self._heap[0][0] + REORDER_S)

    def _first(self) -> tuple[float, int, dict] | None:
        """The earliest event not applied yet (reading on until it is certain)."""
        while not self._settled():
            self._read_one()
        return self._heap[0] if self._heap else None

    def _next_os_time(self, limit: float) -> float | None:
        """The time of the next OS event after position_t, if any at or before `limit`."""
        while True:
            times = self._drop_past_os_times()
            if times and (self._eof or self._read_t >= times[0] + REORDER_S):
                return times[0] if times[0] <= limit else None
            if self._eof or (not times and self._read_t > limit + REORDER_S):
                return None
            self._read_one()

    def _drop_past_os_times(self) -> list[float]:
        """The OS events' times still to come: those played are dropped (they were kept for the whole play
        when it went by advance_to, 2 a second of recording: 4 MiB and each checkpoint's copy of it a day)."""
        times = self._os_times
        while times and times[0] <= self.position_t:
            heapq.heappop(times)
        return times

    def _first_time(self) -> float:
        """The recording's first time (format 1 and 2 alike: the earliest within the first REORDER_S)."""
        first = self._first()
        return first[0] if first is not None else 0.0

    # ---- playing
    def _show_bad(self) -> None:
        """The counted warning on screen: lines skipped on reading, events refused while playing."""
        reader = self._reader
        parts = []
        if reader.bad_lines:
            parts.append(f"skipped {reader.bad_lines} bad line(s) ({reader.first_bad})")
        if self.bad_events:
            parts.append(f"skipped {self.bad_events} bad event(s) ({self.first_bad_event})")
        if parts:
            self.builder.input_warnings["replay"] = "recording: " + "; ".join(parts)

    @property
    def bad_lines(self) -> int:
        """Lines of the file skipped on reading so far (unreadable, over-long, cut)."""
        return self._reader.bad_lines

    def describe(self) -> str:
        """One line for the UI: which file, how long, made where."""
        host = self.header.get("host") or "unknown host"
        created = self.header.get("created")
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(created)) if created else "unknown date"
        return f"{os.path.basename(self.path)} ({self.duration_s:.0f} s, recorded on {host}, {when})"

    @property
    def duration_s(self) -> float:
        return self.end_t - self.start_t

    @property
    def at_end(self) -> bool:
        """True when every event has been applied (it may read on to be sure: under the player's lock, as the
        app asks it from its own thread while the player reads)."""
        with self._lock:
            return self._first() is None

    def state(self) -> MonitorState:
        return self.builder.state

    def _apply(self, e: dict) -> bool:
        """Feed one event; True if it changes what the UI shows. An event the builder cannot use is counted
        and skipped (shown on screen), so one bad event never stops the replay thread."""
        try:
            return self._apply_one(e)
        except Exception as exc:  # the reader checked the fields; this is the last line of defence
            self.bad_events += 1
            self.first_bad_event = self.first_bad_event or f"{e.get('k')!s:.20} event: {type(exc).__name__}"
            self._show_bad()
            return True

    def _apply_one(self, e: dict) -> bool:
        k = e["k"]
        b = self.builder
        if k == "proc":
            declared = self._entering if self._on_entry else self._cmdlines
            declared[(e["pid"], e["start"])] = e.get("cmdline") or ""  # null: unknown
            return False
        if k == "scope":
            # a `memsight run` recording: the command's own agents, as the run counted them (RunChild.family
            # decides each pid once: the union is each pid's one decision); None: every agent (watch)
            own = frozenset(e["own"]) | (self.own or frozenset())
            if own != self.own:
                self.own = own
                b.scope = lambda pids: pids & own  # the chart's sums and the summary, as recorded
            return False
        if k == "os":
            # declared on entry: the lines declared for this table; the others stay as in the last one
            cmdlines = e.get("entering", {}) if self._on_entry else self._cmdlines
            b.update_os(os_snapshot_from(e, cmdlines, self._processes))
        elif k == "nvml":
            b.update_nvml(nvml_snapshot_from(e))
        elif k == "vllm":
            b.update_vllm(vllm_snapshot_from(e))
        elif k == "pool":
            b.update_pool(pool_detail_from(e))
        elif k == "agent_meta":
            cmdline, path, hz = e.get("cmdline") or "", e.get("path") or "", e.get("hz") or 0.0
            b.agent_track(e["pid"], e["start"], cmdline, path, hz)
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
                measured_hz=e.get("sr"),
            )
            if e.get("lost"):
                b.agents[key].lost = e["lost"]
        else:
            return False
        return True

    def advance_to(self, offset_s: float) -> MonitorState:
        """Apply every event up to start + offset_s (seeking backwards replays from a checkpoint)."""
        target = self.start_t + offset_s
        if target < self.position_t:
            self._back_to(target)
        return self._advance(target)

    def _advance(self, target: float) -> MonitorState:
        """Apply every event up to the absolute time `target` (never backwards)."""
        changed, self._declared = self._declared, False
        while True:
            first = self._first()
            if first is None or first[0] > target:
                break
            heapq.heappop(self._heap)
            changed |= self._apply(first[2])
        self.position_t = target
        self._drop_past_os_times()
        if changed or self.builder.state.t == 0.0:
            self.builder.build(min(target, self.end_t) if self.end_t > 0 else target)
        if target <= self.start_t:
            self._first_built = True
        self._checkpoint()
        return self.state()

    def _first_tick(self) -> None:
        """At the start, the state at the first tick, as playing builds it (start() advances to 0 first): a
        step or a seek from there applied the first two ticks together, so the history and the summary began
        at the second sample on those ways and at the first when played, and a state reached by one way was
        not the one the other reached (an index made by scan's walker could not serve the app's seeks)."""
        if self.position_t <= self.start_t and not self._first_built:
            self._advance(self.start_t)

    def step(self) -> MonitorState:
        """Advance to the next OS sample (one recorded tick)."""
        self._first_tick()
        t = self._next_os_time(math.inf)
        if t is not None:
            # the absolute time, not start + (t - start): that can round below t, and the step then
            # never reached the event (found by the fuzz suite: step() spun forever)
            return self._advance(t)
        while (first := self._first()) is not None:
            heapq.heappop(self._heap)
            self._apply(first[2])
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
                    if self._heap:
                        heapq.heappop(self._heap)
                if self.at_end and self.loop:
                    self._restart()
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
            self._back_to(target)
        self._first_tick()
        if target > self.position_t:
            ahead = [c for c in self._ahead if self.position_t < c.position_t <= target]
            if ahead:  # scan's index: no state built on the way to it
                self._restore(max(ahead, key=lambda c: c.position_t))
        while (t := self._next_os_time(target)) is not None:
            self._advance(t)  # absolute: start + (t - start) can round below t (see step)
        self.advance_to(offset_s)

    def scan(self) -> RunSummary | None:
        """The whole recording's summary (peaks, lowest headroom, every alert, with this replay's
        thresholds), from one pass over it with a builder of its own; computed once."""
        if self._scan is None and self._scan_thread is not None:
            self._scan_thread.join()  # already under way (scan_progress): its result
            if self._scan_failed is not None:
                raise self._scan_failed
        if self._scan is None:
            self._scan_walk()
        return self._scan

    def _scan_walk(self) -> None:
        walker = ReplayMonitor(self.path, alert_options=self.alert_options, seekable=False,
                               index=self.seekable)  # fmt: skip
        try:
            span = max(walker.end_t - walker.start_t, 1e-9)
            while not walker.at_end and not self._scan_stop.is_set():
                walker.step()  # one build per recorded OS tick, as the screen sees them
                self._scan_read = min(1.0, (walker.position_t - walker.start_t) / span)
            if walker.at_end:
                with self._lock:
                    # an older recording's command lines (each declared once) for the states ahead: all
                    self._cmdlines.update(walker._cmdlines)
                    self._ahead = walker._checkpoints
                self._scan = walker.state().summary
        finally:
            walker.close()

    def scan_progress(self) -> float | None:
        """scan() without waiting for it (the replay keys: a day's recording takes minutes): started on a
        thread of its own at the first call. None once the summary is ready (next_alert_offset and
        peak_offset then answer at once), else the share of the recording read so far. What stopped the
        scan (the file gone, unreadable) is raised here, as scan() would have raised it."""
        if self._scan is not None:
            return None
        if self._scan_failed is not None:
            raise self._scan_failed
        if self._scan_thread is None:
            self._scan_thread = threading.Thread(target=self._scan_on_thread, name="memsight-replay-scan",
                                                 daemon=True)  # fmt: skip
            self._scan_thread.start()
        return self._scan_read

    def _scan_on_thread(self) -> None:
        try:
            self._scan_walk()
        except Exception as exc:  # noqa: BLE001  (handed to the UI's next scan_progress(), not lost)
            self._scan_failed = exc

    def close(self) -> None:
        self.stop()
        self._scan_stop.set()
        if self._scan_thread is not None:
            self._scan_thread.join(timeout=5)
        self._reader.close()

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


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    position_t: float
    reader: ReaderPosition
    read_t: float
    eof: bool
    seq: int
    own: frozenset[int] | None
    bad_events: int
    first_bad_event: str
    skipped: dict[str, str]
    entering: dict[tuple[int, int], str]  # declared for the next OS line to be read (ReplayMonitor._entering)
    # (the builder, the events waiting in the heap, their OS times): a recent checkpoint's as objects (a
    # short seek back costs a copy), a long-kept one's packed in one pass (StateBuilder.packed)
    held: tuple[StateBuilder, list, list] | bytes


def event_time(e: dict) -> float:
    """An event's time: its "t", a format-1 agent record's own; 0 for a declaration."""
    t = e.get("t")
    if t is None and e["k"] == "agent":
        t = e["r"][0]
    return float(t) if t is not None else 0.0


def tail_time(path: str, data_offset: int, version: int) -> float:
    """The latest time among the last TAIL_BYTES of the file's checked events (0.0 when none): the end of
    the recording without reading all of it. Playing updates it if a later one turns up."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(data_offset, size - TAIL_BYTES)
        f.seek(start)
        lines = f.read().split(b"\n")
    if start > data_offset:
        lines = lines[1:]  # the first piece is the end of a line
    latest = 0.0
    for line in lines:
        try:
            e = limits.loads_json(line) if line.strip() else None
            if not isinstance(e, dict) or not isinstance(e.get("k"), str):
                continue
            if version == 1 or e["k"] not in ("os", "agent"):
                check_event(e)  # format 2's changes are checked by the reader, which needs what came before
            t = event_time(e)
        except (ValueError, TypeError, KeyError, IndexError):
            continue
        if limits.finite(t, 0.0, float(limits.MAX_TIMESTAMP)):
            latest = max(latest, t)
    return latest
