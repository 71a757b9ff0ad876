"""Turns the latest snapshots into one immutable MonitorState (shared by the live Monitor and replay).

It keeps the rings (fixed size, see collectors/ring.py: a day of history), the short chart history the UI
draws (the last `history_points` of each series, appended as samples arrive; a series' tuples are rebuilt
only when it changed, never copied out of the rings per build) and a short list of recent states for the
alert rules. Only the collector threads (or the replay clock) call the update_* methods and
build(); readers get the last built MonitorState, a frozen value, without any lock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from collectors import buckets as buckets_mod
from collectors.agent_info import AgentInfo
from collectors.alerts import AlertOptions, evaluate
from collectors.nvml_collector import gpu_bytes_by_pid, gpu_held_bytes
from collectors.os_collector import with_gpu_bytes
from collectors.ring import Ring, to_float, to_int
from collectors.snapshots import (
    OS_FIELDS,
    AgentRecord,
    AgentView,
    Alert,
    MonitorState,
    NVMLSnapshot,
    OSSnapshot,
    VLLMSnapshot,
)
from collectors.summary import SummaryAccumulator

AGENT_FIELDS = ("allocated", "reserved", "peak_allocated", "rss", "weights_bytes", "kv_bytes")
NO_NVML = NVMLSnapshot(status="not sampled yet", available=False, devices=())


@dataclass(slots=True)
class AgentTrack:
    """What the builder keeps per agent (mutable, owned by the builder)."""

    pid: int
    start_ticks: int
    cmdline: str
    path: str
    hz: float
    status: str = "ok"
    alive: bool = True
    lost: int = 0
    history: deque = field(default_factory=lambda: deque(maxlen=600))
    latest: dict[int, AgentRecord] = field(default_factory=dict)
    rings: dict[int, Ring] = field(default_factory=dict)
    # per device (>= 0): the chart history, (t, allocated, reserved) of the samples its ring accepted
    series: dict[int, deque] = field(default_factory=dict)
    info: AgentInfo | None = None  # the agent's latest info file (collectors/agent_info.py)


class StateBuilder:
    def __init__(
        self,
        history_points: int = 600,
        alert_window_s: float = 60.0,
        alert_options: AlertOptions | None = None,
        max_alerts: int = 50,
        replay: bool = False,
    ) -> None:
        self.history_points = history_points
        self.alert_window_s = alert_window_s
        self.alert_options = alert_options or AlertOptions()
        self.replay = replay
        self._lock = threading.Lock()  # between writer threads only; readers never take it
        self.os: OSSnapshot | None = None
        self.nvml: NVMLSnapshot = NO_NVML
        self.vllm: VLLMSnapshot | None = None
        self.engine = None  # collectors.engine_metrics.EngineSnapshot (--engine-url)
        self.engine_log = None  # collectors.engine_log_follow.FollowedLog (the child's log)
        self.agents: dict[tuple[int, int], AgentTrack] = {}
        self.os_ring = Ring("os", OS_FIELDS)
        self.headroom_ring = Ring("headroom", ("headroom",))
        # chart history (what MonitorState.history shows), oldest first, bounded by history_points
        self._available: deque[tuple[float, float]] = deque(maxlen=history_points)
        self._headroom: deque[tuple[float, float]] = deque(maxlen=history_points)
        self._headroom_from: tuple[float | None, float | None] | None = None  # (os t, nvml t) last charted
        self._series_changed: set[str] = set()  # "available" | "headroom" | "agents": rebuild at next build
        self._history_parts: dict[str, dict[str, tuple[tuple[float, ...], ...]]] = {}
        self._history: Mapping[str, tuple[tuple[float, ...], ...]] = MappingProxyType({})
        self.recent: deque[MonitorState] = deque()
        self.alerts: deque[Alert] = deque(maxlen=max_alerts)
        self._alert_keys: dict[tuple, float] = {}
        self.dropped: dict[str, int] = {}
        self.restarts: dict[str, int] = {}  # sampling thread name -> times the Monitor restarted it
        self.status: dict[str, str] = {"os": "not sampled yet", "nvml": "not sampled yet", "agents": "ok"}
        self.input_warnings: dict[str, str] = {}  # source -> one counted line about bad input it skipped
        self.summary = SummaryAccumulator()  # peaks, lowest headroom, every alert: the end-of-run summary
        # `memsight run`: agent pids -> those that are the command's own (tui/cmd_run.py RunChild.family);
        # the summary's peaks then sum those alone. None: every agent (watch, replay)
        self.scope: Callable[[frozenset[int]], frozenset[int]] | None = None
        # the chart's allocated / reserved / gap sums follow the same scope; on_scope(t, own) is called (under
        # the lock) each time the set of this run's agents grows (the Monitor records it, so a replay of the
        # recording sums the same agents)
        self.on_scope: Callable[[float, frozenset[int]], None] | None = None
        self._own: frozenset[int] | None = None
        self.on_alert: Callable[[Alert], None] | None = None  # called (under the lock) for each new alert
        self.state: MonitorState = self._empty()

    def _empty(self) -> MonitorState:
        return MonitorState(
            t=0.0,
            os=None,
            nvml=self.nvml,
            agents=(),
            buckets=(),
            alerts=(),
            unified=False,
            headroom_bytes=None,
            headroom_source="unknown",
            history=MappingProxyType({}),
            replay=self.replay,
        )

    # ---- updates (collector threads)
    def update_os(self, snap: OSSnapshot) -> None:
        with self._lock:
            self.os = snap
            self.status["os"] = "ok"
            accepted = self.os_ring.append(snap.t, {name: getattr(snap, name) for name in OS_FIELDS})
            if accepted:  # a sample the ring refused (time going backwards) is not charted either
                self._available.append((snap.t, to_float(snap.mem_available)))
                self._series_changed.add("available")

    def os_failed(self, message: str) -> None:
        with self._lock:
            self.status["os"] = message
            self.dropped["os"] = self.dropped.get("os", 0) + 1

    def update_vllm(self, snap: VLLMSnapshot) -> None:
        with self._lock:
            self.vllm = snap
            self.status["vllm"] = snap.status
            if snap.refused:  # out-of-range values: said on screen, never shown or exported as figures
                more = f" (and {len(snap.refused) - 1} more)" if len(snap.refused) > 1 else ""
                self.input_warnings["vllm"] = f"refused vLLM value(s): {snap.refused[0]}{more}"
            else:
                self.input_warnings.pop("vllm", None)

    def update_engine(self, snap) -> None:  # noqa: ANN001  (collectors.engine_metrics.EngineSnapshot)
        with self._lock:
            self.engine = snap
            self.status["engine"] = snap.status

    def update_engine_log(self, followed) -> None:  # noqa: ANN001  (engine_log_follow.FollowedLog)
        with self._lock:
            self.engine_log = followed

    def update_nvml(self, snap: NVMLSnapshot) -> None:
        with self._lock:
            self.nvml = snap
            self.status["nvml"] = snap.status

    def agent_track(self, pid: int, start_ticks: int, cmdline: str, path: str, hz: float) -> AgentTrack:
        with self._lock:
            key = (pid, start_ticks)
            if key not in self.agents:
                self.agents[key] = AgentTrack(pid, start_ticks, cmdline, path, hz)
            return self.agents[key]

    def update_agent_info(self, key: tuple[int, int], info: AgentInfo) -> None:
        with self._lock:
            track = self.agents.get(key)
            if track is not None:
                track.info = info

    def update_agent(
        self,
        key: tuple[int, int],
        records: tuple[AgentRecord, ...],
        *,
        status: str | None = None,
        alive: bool | None = None,
        lost: int = 0,
    ) -> None:
        with self._lock:
            track = self.agents.get(key)
            if track is None:
                return
            for r in records:
                track.history.append(r)
                track.latest[r.device] = r
                ring = track.rings.get(r.device)
                if ring is None:
                    ring = track.rings[r.device] = Ring(f"agent:{key[0]}:{r.device}", AGENT_FIELDS)
                accepted = ring.append(r.t, {name: getattr(r, name) for name in AGENT_FIELDS})
                if accepted and r.device >= 0:
                    series = track.series.get(r.device)
                    if series is None:
                        series = track.series[r.device] = deque(maxlen=self.history_points)
                    series.append((r.t, to_float(r.allocated), to_float(r.reserved)))
                    self._series_changed.add("agents")
            track.lost += lost
            if lost:
                self.dropped[f"agent:{key[0]}"] = track.lost
            if alive is not None:
                track.alive = alive
            if status is not None:
                track.status = status
            elif track.latest:
                newest = max(track.latest.values(), key=lambda r: r.t)
                track.status = "ok" if newest.cuda_state == "ok" else newest.cuda_state

    def drop_agent(self, key: tuple[int, int]) -> None:
        with self._lock:
            if self.agents.pop(key, None) is not None:
                self._series_changed.add("agents")

    # ---- build
    def _dropped_now(self) -> dict[str, int]:
        dropped = dict(self.dropped)
        refused = self.os_ring.dropped + self.headroom_ring.dropped
        refused += sum(ring.dropped for track in self.agents.values() for ring in track.rings.values())
        if refused:
            dropped["rings"] = refused  # samples a ring refused (time going backwards)
        return dropped

    def _views(self) -> tuple[AgentView, ...]:
        views = []
        for track in self.agents.values():
            latest = tuple(track.latest[d] for d in sorted(track.latest))
            views.append(
                AgentView(
                    pid=track.pid,
                    start_ticks=track.start_ticks,
                    cmdline=track.cmdline,
                    path=track.path,
                    status=track.status,
                    alive=track.alive,
                    latest=latest,
                    history=tuple(track.history),
                    lost_records=track.lost,
                    hz=track.hz,
                    info=track.info,
                )
            )
        return tuple(sorted(views, key=lambda v: v.pid))

    def _history_now(self) -> Mapping[str, tuple[tuple[float, ...], ...]]:
        """MonitorState.history; the same mapping as last time unless a series got a sample since."""
        if not self._series_changed:
            return self._history
        parts = self._history_parts
        if "available" in self._series_changed:
            parts["available"] = {"available": _columns(self._available, 2)}
        if "headroom" in self._series_changed:
            parts["headroom"] = {"headroom": _columns(self._headroom, 2)}
        if "agents" in self._series_changed:
            parts["agents"] = self._agent_history()
        self._series_changed.clear()
        out: dict[str, tuple[tuple[float, ...], ...]] = {
            "available": ((), ()),
            "headroom": ((), ()),
            "allocated": ((), ()),
            "reserved": ((), ()),
            "gap": ((), ()),
        }
        for part in parts.values():
            out.update(part)
        self._history = MappingProxyType(out)
        return self._history

    def _agent_history(self) -> dict[str, tuple[tuple[float, ...], ...]]:
        n = self.history_points
        out: dict[str, tuple[tuple[float, ...], ...]] = {}
        sums: dict[str, dict[float, float]] = {"allocated": {}, "reserved": {}, "gap": {}}
        own = self._own
        for track in self.agents.values():
            for device, series in track.series.items():
                times, alloc, resv = _columns(series, 3)
                gap = tuple(r - a for a, r in zip(alloc, resv, strict=True))
                for name, column in (("allocated", alloc), ("reserved", resv), ("gap", gap)):
                    out[f"{name}:{track.pid}:{device}"] = (times, column)
                    if own is not None and track.pid not in own:
                        continue  # another run's agent: its own series stays, the sums leave it out
                    # sums are aligned on the agent's own sampling times, rounded to 0.1 s
                    for t, v in zip(times, column, strict=True):
                        if v == v:
                            key = round(t, 1)
                            sums[name][key] = sums[name].get(key, 0.0) + v
        for name, summed in sums.items():
            times = tuple(sorted(summed))[-n:]
            out[name] = (times, tuple(summed[t] for t in times))
        return out

    def _chart_headroom(self, t: float, headroom: int | None, os_snap, nvml: NVMLSnapshot) -> None:
        """One headroom point per new OS or NVML snapshot (not per build: three threads build)."""
        source = (os_snap.t if os_snap is not None else None, nvml.t)
        if headroom is None or source == self._headroom_from:
            return
        self._headroom_from = source
        if self.headroom_ring.append(t, (float(headroom),)):
            self._headroom.append((t, float(headroom)))
            self._series_changed.add("headroom")

    def _scope_now(self, t: float) -> frozenset[int] | None:
        """This run's agents among those tracked (None: no scope, every agent); the chart sums are rebuilt and
        on_scope told when the set changed."""
        if self.scope is None:
            return None
        own = self.scope(frozenset(pid for pid, _ in self.agents))
        if own != self._own:
            self._own = own
            self._series_changed.add("agents")
            if self.on_scope is not None:
                self.on_scope(t, own)
        return own

    def build(self, t: float) -> MonitorState:
        with self._lock:
            own = self._scope_now(t)
            os_snap, nvml = self.os, self.nvml
            if os_snap is not None and nvml.available:
                by_pid = gpu_bytes_by_pid(nvml)
                if by_pid:
                    os_snap = replace(os_snap, processes=with_gpu_bytes(os_snap.processes, by_pid))
            views = self._views()
            measured = tuple(b for v in views for b in buckets_mod.measure(v, nvml))
            unified = any(d.unified for d in nvml.devices) or any(
                r.is_integrated for v in views for r in v.latest if r.is_integrated
            )
            headroom, source = headroom_of(os_snap, nvml, views, unified)
            self._chart_headroom(t, headroom, self.os, nvml)
            system_used = gpu_held = gap = None
            if unified and os_snap is not None:
                system_used = os_snap.mem_total - os_snap.mem_available
                gpu_held = gpu_held_bytes(nvml)
                gap = system_used - gpu_held if gpu_held is not None else None
            state = MonitorState(
                t=t,
                os=os_snap,
                nvml=nvml,
                agents=views,
                buckets=measured,
                vllm=self.vllm,
                engine=self.engine,
                engine_log=self.engine_log,
                alerts=(),
                unified=unified,
                headroom_bytes=headroom,
                headroom_source=source,
                history=self._history_now(),
                system_used_bytes=system_used,
                gpu_held_bytes=gpu_held,
                unified_gap_bytes=gap,
                dropped=MappingProxyType(self._dropped_now()),
                source_status=MappingProxyType(dict(self.status)),
                restarts=MappingProxyType(dict(self.restarts)),
                replay=self.replay,
                input_warnings=MappingProxyType(dict(self.input_warnings)),
            )
            self.recent.append(state)
            while self.recent and t - self.recent[0].t > self.alert_window_s:
                self.recent.popleft()
            raised = []
            for alert in evaluate(tuple(self.recent), self.alert_options):
                key = (alert.kind, alert.severity, alert.pid, alert.device)
                # one alert per condition until it has been quiet for the alert window; the severity is part
                # of the condition, so a headroom warning followed by a critical shows both
                if t - self._alert_keys.get(key, -1e18) > self.alert_window_s:
                    self.alerts.append(alert)
                    raised.append(alert)
                self._alert_keys[key] = t
            for alert in raised:
                if self.on_alert is not None:
                    self.on_alert(alert)  # the Monitor records it
            summary = self.summary.add(state, raised, own)
            state = replace(state, alerts=tuple(self.alerts), summary=summary)
            self.recent[-1] = state
            self.state = state
            return state


def _columns(rows: deque, width: int) -> tuple[tuple[float, ...], ...]:
    """deque of (t, v1, ...) rows -> (times, v1s, ...) tuples; `width` columns even when empty."""
    if not rows:
        return ((),) * width
    return tuple(zip(*rows, strict=True))


def headroom_of(
    os_snap: OSSnapshot | None, nvml: NVMLSnapshot, views: tuple[AgentView, ...], unified: bool
) -> tuple[int | None, str]:
    """MemAvailable on unified memory; else the smallest device free (NVML, then the agents' mem_get_info)."""
    if unified:
        return (os_snap.mem_available, "MemAvailable") if os_snap is not None else (None, "unknown")
    frees = [d.free for d in nvml.devices if d.free is not None]
    if frees:
        return min(frees), "device free (NVML)"
    agent_frees = [r.cuda_free for v in views for r in v.latest if r.cuda_free is not None]
    if agent_frees:
        return min(agent_frees), "device free (agent)"
    if os_snap is not None and not nvml.devices:
        return os_snap.mem_available, "MemAvailable"  # no GPU at all: host memory is the only pool
    return None, "unknown"


def to_bytes(x: float) -> int | None:
    return to_int(x)
