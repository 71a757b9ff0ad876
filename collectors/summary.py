"""The end-of-run summary: peak per bucket, peak reserved − allocated, lowest headroom, the alerts raised.

One accumulator fed with every MonitorState the StateBuilder builds (so the summary covers exactly what the
screen showed, at the monitor's rate, live and in replay alike); its value is a frozen RunSummary carried by
each state. The Live screen draws it, `memsight run` prints it on exit (both as summary_lines in
tui/screens/run_summary.py writes it), the recording stores it and `--json` gives it (summary_to_json /
summary_from_json round-trip exactly).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

from collectors.snapshots import Alert, MonitorState

# (key, label): the peaks kept, summed over agents and devices at each build
PEAK_KEYS: tuple[tuple[str, str], ...] = (
    ("weights", "weights"),
    ("kv", "KV cache"),
    ("activations", "activations"),
    ("tensors", "untracked tensors"),
    ("gap", "reserved − allocated"),
    ("non_torch", "non-PyTorch"),
    ("allocated", "allocated"),
    ("reserved", "reserved"),
    ("system_used", "system used"),
)
MAX_ALERTS = 200  # kept in the summary (the Live screen's log keeps its own, shorter list)


@dataclass(frozen=True, slots=True)
class Peak:
    key: str
    bytes: int
    t: float


@dataclass(frozen=True, slots=True)
class RunSummary:
    start_t: float
    end_t: float
    peaks: tuple[Peak, ...]  # PEAK_KEYS order; a bucket never measured is absent
    lowest_headroom: int | None
    lowest_headroom_t: float | None
    headroom_source: str
    alerts: tuple[Alert, ...]  # every alert raised, oldest first (at most MAX_ALERTS)
    alerts_total: int  # raised in all, MAX_ALERTS or more
    # whose buckets the peaks sum: "" = every agent; under `memsight run`, the command's own processes
    # ("pids 4121, 4130 (this run's); 1 other agent not counted")
    scope: str = ""

    def peak(self, key: str) -> Peak | None:
        return next((p for p in self.peaks if p.key == key), None)


def _sum(values) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def figures(state: MonitorState, own: frozenset[int] | None = None) -> dict[str, int | None]:
    """The summed figures of one state that the summary keeps the peak of: over every agent, or over the
    agents whose pid is in `own` (the `memsight run` command's own processes)."""
    b = state.buckets if own is None else tuple(x for x in state.buckets if x.pid in own)
    return {
        "weights": _sum(x.weights_bytes for x in b),
        "kv": _sum(x.kv_bytes for x in b),
        "activations": _sum(x.activations_bytes for x in b),
        "tensors": _sum(x.other_allocated_bytes for x in b),
        "gap": _sum(x.allocator_gap_bytes for x in b),
        "non_torch": _sum(x.non_torch_bytes for x in b),
        "allocated": _sum(x.allocated for x in b),
        "reserved": _sum(x.reserved for x in b),
        "system_used": None if state.os is None else state.os.mem_total - state.os.mem_available,
    }


class SummaryAccumulator:
    """Mutable, owned by one StateBuilder (called under its lock)."""

    def __init__(self) -> None:
        self.start_t: float | None = None
        self.end_t = 0.0
        self.peaks: dict[str, Peak] = {}
        self.lowest: tuple[int, float, str] | None = None
        self.alerts: list[Alert] = []
        self.alerts_total = 0
        self._value: RunSummary | None = None
        self.own_seen: set[int] = set()  # with a scope: the agents counted so far
        self.others_seen: set[int] = set()  # and those left out (someone else's)

    def copy(self) -> SummaryAccumulator:
        other = copy.copy(self)
        other.peaks, other.alerts = dict(self.peaks), list(self.alerts)
        other.own_seen, other.others_seen = set(self.own_seen), set(self.others_seen)
        return other

    def add(
        self, state: MonitorState, new_alerts: list[Alert], own: frozenset[int] | None = None
    ) -> RunSummary:
        """`own`: count only these agents' buckets (None: every agent's)."""
        if self.start_t is None:
            self.start_t = state.t
        changed = self._value is None or state.t != self.end_t or bool(new_alerts)
        self.end_t = state.t
        scope = ""
        if own is not None:
            pids = {b.pid for b in state.buckets}
            before = (len(self.own_seen), len(self.others_seen))
            self.own_seen.update(pids & own)
            self.others_seen.update(pids - own)
            changed = changed or before != (len(self.own_seen), len(self.others_seen))
            scope = _scope_text(self.own_seen, self.others_seen)
        for key, value in figures(state, own).items():
            if value is not None and (key not in self.peaks or value > self.peaks[key].bytes):
                self.peaks[key] = Peak(key, value, state.t)
                changed = True
        h = state.headroom_bytes
        if h is not None and (self.lowest is None or h < self.lowest[0]):
            self.lowest = (h, state.t, state.headroom_source)
            changed = True
        self.alerts_total += len(new_alerts)
        self.alerts.extend(new_alerts)
        del self.alerts[MAX_ALERTS:]
        if changed or self._value is None:
            low = self.lowest
            self._value = RunSummary(
                start_t=self.start_t,
                end_t=self.end_t,
                peaks=tuple(self.peaks[k] for k, _ in PEAK_KEYS if k in self.peaks),
                lowest_headroom=low[0] if low else None,
                lowest_headroom_t=low[1] if low else None,
                headroom_source=low[2] if low else "unknown",
                alerts=tuple(self.alerts),
                alerts_total=self.alerts_total,
                scope=scope,
            )
        return self._value


def _scope_text(own: set[int], others: set[int]) -> str:
    mine = ", ".join(str(p) for p in sorted(own)[:6]) + (" ..." if len(own) > 6 else "")
    text = f"this run's agents only (pid {mine})" if own else "this run's agents only (none seen)"
    if others:
        text += f"; {len(others)} other agent{'s' if len(others) != 1 else ''} in the directory not counted"
    return text


# ---- output ---------------------------------------------------------------------------------------------
def alert_to_json(a: Alert) -> dict:
    return {
        "t": a.t,
        "kind": a.kind,
        "severity": a.severity,
        "message": a.message,
        "pid": a.pid,
        "device": a.device,
        "value": a.value,
    }


def alert_from_json(d: dict) -> Alert:
    return Alert(
        t=float(d["t"]),
        kind=str(d["kind"]),
        severity=str(d["severity"]),
        message=str(d["message"]),
        pid=d.get("pid"),
        device=d.get("device"),
        value=d.get("value"),
    )


def summary_to_json(s: RunSummary) -> dict:
    """Bytes as integers, times as the epoch seconds the monitor sampled at."""
    return {
        "start": s.start_t,
        "end": s.end_t,
        "peaks": {p.key: {"bytes": p.bytes, "t": p.t} for p in s.peaks},
        "lowest_headroom": None
        if s.lowest_headroom is None
        else {"bytes": s.lowest_headroom, "t": s.lowest_headroom_t, "source": s.headroom_source},
        "alerts_total": s.alerts_total,
        "alerts": [alert_to_json(a) for a in s.alerts],
        **({"scope": s.scope} if s.scope else {}),
    }


def summary_from_json(d: dict) -> RunSummary:
    low = d.get("lowest_headroom")
    peaks = d.get("peaks", {})
    return RunSummary(
        start_t=float(d["start"]),
        end_t=float(d["end"]),
        peaks=tuple(
            Peak(k, int(peaks[k]["bytes"]), float(peaks[k]["t"])) for k, _ in PEAK_KEYS if k in peaks
        ),
        lowest_headroom=None if low is None else int(low["bytes"]),
        lowest_headroom_t=None if low is None else float(low["t"]),
        headroom_source="unknown" if low is None else str(low.get("source", "unknown")),
        alerts=tuple(alert_from_json(a) for a in d.get("alerts", ())),
        alerts_total=int(d.get("alerts_total", 0)),
        scope=str(d.get("scope", "")),
    )


def clock(t: float) -> str:
    """HH:MM:SS of an epoch time, local time (what the user's terminal clock says)."""
    return time.strftime("%H:%M:%S", time.localtime(t))
