"""Turns the latest snapshots into one immutable MonitorState (shared by the live Monitor and replay).

It keeps the short chart history the UI draws (the last `history_points` of each series, appended as samples
arrive; a series' tuples are rebuilt only when it changed), each source's time order (collectors/ring.py's
TimeGate: a sample older than the last is refused and counted) and a short list of recent states for the
alert rules. Only the collector threads (or the replay clock) call the update_* methods and
build(); readers get the last built MonitorState, a frozen value, without any lock.
"""

from __future__ import annotations

import copy
import copyreg
import io
import pickle
import threading
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from collectors import buckets as buckets_mod
from collectors.agent_info import AgentInfo
from collectors.alerts import AlertOptions, evaluate
from collectors.nvml_collector import gpu_bytes_by_pid, gpu_held_bytes
from collectors.os_collector import with_gpu_bytes
from collectors.pool import pool_parts
from collectors.ring import TimeGate, to_float, to_int
from collectors.snapshots import (
    SAMPLED_HZ_WINDOW,
    AgentRecord,
    AgentView,
    Alert,
    MonitorState,
    NVMLSnapshot,
    OSSnapshot,
    PeerSnapshot,
    PoolDetail,
    ProcessBytes,
    VLLMSnapshot,
    sampled_rate,
    tightest_agent_record,
)
from collectors.summary import SummaryAccumulator

# the conditions remembered for "one alert per condition" (_raise_alerts): those quiet for twice the alert
# window are forgotten once there are more than ALERT_KEYS_KEPT (one key per process that ever grew)
ALERT_KEYS_KEPT = 64
NO_NVML = NVMLSnapshot(status="not sampled yet", available=False, devices=())


def _mapping_proxy(values: dict) -> MappingProxyType:
    return MappingProxyType(values)


# pickle's table, with the read-only mappings the states hold (MappingProxyType has no pickling of its own)
_PACK_TABLE = {**copyreg.dispatch_table, MappingProxyType: lambda proxy: (_mapping_proxy, (dict(proxy),))}


def pack(value: object) -> bytes:
    """`value` as compressed bytes (pickle, zlib level 1): a replay's checkpoints kept this way hold about a
    tenth of the memory the objects do (the bench's 6 h recording at 2 h: a builder of about 1 MiB of objects
    and the events waiting beside it, 70 KB)."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _PACK_TABLE
    pickler.dump(value)
    return zlib.compress(out.getbuffer(), 1)


def unpack(packed: bytes) -> Any:
    """pack()'s value again (our own bytes, made in this process: never a file's)."""
    return pickle.loads(zlib.decompress(packed))


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
    gates: dict[int, TimeGate] = field(default_factory=dict)  # per device: its samples' time order
    # per device (>= 0): the chart history, (t, allocated, reserved) of the samples its gate accepted
    series: dict[int, deque] = field(default_factory=dict)
    info: AgentInfo | None = None  # the agent's latest info file (collectors/agent_info.py)
    # times of the last records read, kept or not (the monitor keeps records at its own rate), and the rate
    # they give; a replay sets measured_hz from the recording instead
    seen: deque = field(default_factory=lambda: deque(maxlen=SAMPLED_HZ_WINDOW))
    measured_hz: float | None = None

    def copy(self) -> AgentTrack:
        """A track that goes on on its own (the records in it are immutable: shared)."""
        return replace(
            self,
            history=deque(self.history, maxlen=self.history.maxlen),
            latest=dict(self.latest),
            gates={device: gate.copy() for device, gate in self.gates.items()},
            series={device: deque(s, maxlen=s.maxlen) for device, s in self.series.items()},
            seen=deque(self.seen, maxlen=self.seen.maxlen),
        )


SUMMED = ("allocated", "reserved", "gap")


class AgentCharts:
    """The agents' part of the chart history: each (agent, device) series as columns, and the allocated /
    reserved / gap sums over this run's agents, aligned on the agents' sampling times rounded to 0.1 s.

    Kept up to date as each point comes and goes (point_added), so a build costs what changed, not a walk of
    every 600-point series (the replay of a day's recording spent most of its time there). A time's sum adds
    its values in the order a walk would (agent, device, sample) starting from 0.0, so it is the walk's sum to
    the last bit; when that order changes (an agent dropped, the run's agents changed, a copy) the sums are
    made again by the walk (rebuild)."""

    def __init__(self, points: int) -> None:
        self.points = points
        # (agent key, device) -> its times, allocated, reserved and gap as deques (the series' own points, as
        # columns: a build copies them into tuples instead of transposing 600 points) and as tuples (None:
        # changed since)
        self._deques: dict[tuple, tuple[deque, ...]] = {}
        self._columns: dict[tuple, tuple | None] = {}
        self._counts: dict[tuple, int] = {}  # (agent key, device) -> points it ever got (a point's number)
        # name -> rounded time -> (agent, device, point number) -> value; None: made again when asked for
        self._parts: dict[str, dict[float, dict[tuple, float]]] | None = None
        self._sums: dict[str, dict[float, float]] = {}

    def copy(self) -> AgentCharts:
        other = AgentCharts(self.points)
        other._counts = dict(self._counts)
        return other  # its columns and sums are made again from the series when first asked for

    def invalidate(self) -> None:
        self._parts = None

    def dropped(self, key: tuple[int, int]) -> None:
        for table in (self._deques, self._columns, self._counts):
            for series in [k for k in table if k[0] == key]:
                del table[series]
        self._parts = None

    def point_added(self, agents: dict, key: tuple, device: int, series: deque, evicted, own) -> None:
        """`series` (of agents[key], device) just got its newest point; `evicted`: the point it pushed out."""
        number = self._counts.get((key, device), 0)
        self._counts[(key, device)] = number + 1
        self._columns[(key, device)] = None
        columns = self._deques.get((key, device))
        if columns is not None:
            t, allocated, reserved = series[-1]
            for column, value in zip(columns, (t, allocated, reserved, reserved - allocated), strict=True):
                column.append(value)
        if self._parts is None or (own is not None and key[0] not in own):
            return
        order = (list(agents).index(key), list(agents[key].series).index(device))
        if evicted is not None:
            self._change(evicted, (*order, number - series.maxlen), remove=True)
        self._change(series[-1], (*order, number), remove=False)

    def _change(self, point: tuple, order: tuple, remove: bool) -> None:
        t, allocated, reserved = point
        key = round(t, 1)
        for name, v in zip(SUMMED, (allocated, reserved, reserved - allocated), strict=True):
            if v != v:
                continue
            parts = self._parts[name].setdefault(key, {})
            if remove:
                parts.pop(order, None)
            else:
                parts[order] = v
            if parts:
                total = 0.0
                for o in sorted(parts):
                    total += parts[o]
                self._sums[name][key] = total
            else:
                del self._parts[name][key]
                self._sums[name].pop(key, None)

    def rebuild(self, agents: dict, own) -> None:
        """The sums made by the walk over every series of this run's agents."""
        self._parts = {name: {} for name in SUMMED}
        self._sums = {name: {} for name in SUMMED}
        for a, (key, track) in enumerate(agents.items()):
            if own is not None and track.pid not in own:
                continue  # another run's agent: its own series stays, the sums leave it out
            for d, (device, series) in enumerate(track.series.items()):
                first = self._counts.get((key, device), len(series)) - len(series)
                for i, point in enumerate(series):
                    self._change(point, (a, d, first + i), remove=False)

    def history(self, agents: dict, own) -> dict[str, tuple[tuple[float, ...], ...]]:
        if self._parts is None:
            self.rebuild(agents, own)
        out: dict[str, tuple[tuple[float, ...], ...]] = {}
        for key, track in agents.items():
            for device, series in track.series.items():
                columns = self._columns.get((key, device))
                if columns is None:
                    deques = self._deques.get((key, device))
                    if deques is None:  # first asked for (or after a copy): made from the series' points
                        made = _columns(series, 3)
                        gap = tuple(r - a for a, r in zip(made[1], made[2], strict=True))
                        deques = tuple(deque(c, maxlen=series.maxlen) for c in (*made, gap))
                        self._deques[(key, device)] = deques
                    columns = self._columns[(key, device)] = tuple(tuple(c) for c in deques)
                for name, column in zip(SUMMED, columns[1:], strict=True):
                    out[f"{name}:{track.pid}:{device}"] = (columns[0], column)
        for name in SUMMED:
            summed = self._sums[name]
            times = tuple(sorted(summed))[-self.points :]
            out[name] = (times, tuple(map(summed.__getitem__, times)))
        return out


class StateBuilder:
    def __init__(
        self,
        history_points: int = 600,
        alert_window_s: float = 60.0,
        alert_options: AlertOptions | None = None,
        max_alerts: int = 50,
        replay: bool = False,
    ) -> None:
        """The history the screens draw is the last `history_points` samples of each series (bounded deques);
        a source's samples are otherwise kept only as far as their time order (TimeGate): the monitor kept a
        day of each source in a Ring as well, which nothing read (1.8 MiB a day for the OS and headroom,
        1.1 MiB per agent device, issue 20's all-day resident memory)."""
        self.history_points = history_points
        self.alert_window_s = alert_window_s
        self.alert_options = alert_options or AlertOptions()
        self.replay = replay
        self._lock = threading.Lock()  # between writer threads only; readers never take it
        self.os: OSSnapshot | None = None
        self.nvml: NVMLSnapshot = NO_NVML
        self.vllm: VLLMSnapshot | None = None
        self.pool: PoolDetail | None = None  # the latest detail of the pool's decomposition
        self.engine = None  # collectors.engine_metrics.EngineSnapshot (--engine-url)
        self.engine_log = None  # collectors.engine_log_follow.FollowedLog (the child's log)
        self.agents: dict[tuple[int, int], AgentTrack] = {}
        self.os_gate = TimeGate()
        self.headroom_gate = TimeGate()
        # chart history (what MonitorState.history shows), oldest first, bounded by history_points
        # (times, values) as two deques each: a build copies them into the history's tuples
        self._available = (deque(maxlen=history_points), deque(maxlen=history_points))
        self._headroom = (deque(maxlen=history_points), deque(maxlen=history_points))
        self._headroom_from: tuple[float | None, float | None] | None = None  # (os t, nvml t) last charted
        self._series_changed: set[str] = set()  # "available" | "headroom" | "agents": rebuild at next build
        self._history_parts: dict[str, dict[str, tuple[tuple[float, ...], ...]]] = {}
        self._history: Mapping[str, tuple[tuple[float, ...], ...]] = MappingProxyType({})
        self._charts = AgentCharts(history_points)
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
        # --peer: the latest snapshot of each peer (collectors/peers.py), read at each build; never blocks
        self.peers: Callable[[], tuple[PeerSnapshot, ...]] | None = None
        self.state: MonitorState = self._empty()

    def copy(self) -> StateBuilder:
        """A builder that goes on from here on its own (a replay's checkpoints): every container copied,
        the immutable values in them (snapshots, records, states, alerts) shared."""
        with self._lock:
            other = copy.copy(self)
            other._lock = threading.Lock()
            other.agents = {key: track.copy() for key, track in self.agents.items()}
            other._charts = self._charts.copy()
            other.os_gate, other.headroom_gate = self.os_gate.copy(), self.headroom_gate.copy()
            other._available = tuple(deque(c, maxlen=c.maxlen) for c in self._available)
            other._headroom = tuple(deque(c, maxlen=c.maxlen) for c in self._headroom)
            other._series_changed = set(self._series_changed)
            other._history_parts = dict(self._history_parts)
            other.recent = deque(self.recent)
            other.alerts = deque(self.alerts, maxlen=self.alerts.maxlen)
            for name in ("_alert_keys", "dropped", "restarts", "status", "input_warnings"):
                setattr(other, name, dict(getattr(self, name)))
            other.summary = self.summary.copy()
            return other

    # what binds a builder to this process and its owner (its lock, the owner's callbacks): not part of what
    # packed() keeps
    _BOUND = ("_lock", "scope", "on_scope", "on_alert", "peers")

    def packed(self, *beside: object) -> bytes:
        """What copy() keeps, with `beside` (the owner's own state: packed in the same pass), as pack()'s
        bytes of (values, *beside): a replay's long-kept checkpoints (collectors/replay.py). unpack() them
        and hand the values to restored()."""
        with self._lock:
            return pack(({name: v for name, v in vars(self).items() if name not in self._BOUND}, *beside))

    def restored(self, values: dict[str, Any]) -> StateBuilder:
        """A builder going on from another's packed() values, bound as this one is (its own lock, this one's
        callbacks)."""
        other = copy.copy(self)
        vars(other).update(values)
        other._lock = threading.Lock()
        return other

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
            headroom_total_bytes=None,
            headroom_source="unknown",
            history=MappingProxyType({}),
            replay=self.replay,
        )

    # ---- updates (collector threads)
    def update_os(self, snap: OSSnapshot) -> None:
        with self._lock:
            self.os = snap
            self.status["os"] = "ok"
            if self.os_gate.append(snap.t):  # a sample the gate refused (time going backwards) is not charted
                self._available[0].append(snap.t)
                self._available[1].append(to_float(snap.mem_available))
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

    def update_pool(self, detail: PoolDetail) -> None:
        with self._lock:
            self.pool = detail

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
        seen: tuple[float, ...] = (),
        measured_hz: float | None = None,
    ) -> None:
        """`records`: those kept; `seen`: the times of every record read (the rate is measured on them), or
        `measured_hz` as a recording says it."""
        with self._lock:
            track = self.agents.get(key)
            if track is None:
                return
            if seen:
                track.seen.extend(seen)
                track.measured_hz = sampled_rate(track.seen)
            elif measured_hz is not None:
                track.measured_hz = measured_hz
            for r in records:
                track.history.append(r)
                track.latest[r.device] = r
                gate = track.gates.get(r.device)
                if gate is None:
                    gate = track.gates[r.device] = TimeGate()
                accepted = gate.append(r.t)
                if accepted and r.device >= 0:
                    series = track.series.get(r.device)
                    if series is None:
                        series = track.series[r.device] = deque(maxlen=self.history_points)
                    evicted = series[0] if len(series) == series.maxlen else None
                    series.append((r.t, to_float(r.allocated), to_float(r.reserved)))
                    self._charts.point_added(self.agents, key, r.device, series, evicted, self._own)
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
                self._charts.dropped(key)
                self._series_changed.add("agents")

    # ---- build
    def _dropped_now(self) -> dict[str, int]:
        dropped = dict(self.dropped)
        refused = self.os_gate.dropped + self.headroom_gate.dropped
        refused += sum(gate.dropped for track in self.agents.values() for gate in track.gates.values())
        if refused:
            # samples refused for time going backwards; "rings" is the name /metrics has exported them under
            dropped["rings"] = refused
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
                    measured_hz=track.measured_hz,
                )
            )
        return tuple(sorted(views, key=lambda v: v.pid))

    def _history_now(self) -> Mapping[str, tuple[tuple[float, ...], ...]]:
        """MonitorState.history; the same mapping as last time unless a series got a sample since."""
        if not self._series_changed:
            return self._history
        parts = self._history_parts
        if "available" in self._series_changed:
            parts["available"] = {"available": (tuple(self._available[0]), tuple(self._available[1]))}
        if "headroom" in self._series_changed:
            parts["headroom"] = {"headroom": (tuple(self._headroom[0]), tuple(self._headroom[1]))}
        if "agents" in self._series_changed:
            parts["agents"] = self._charts.history(self.agents, self._own)
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

    def _chart_headroom(self, t: float, headroom: int | None, os_snap, nvml: NVMLSnapshot) -> None:
        """One headroom point per new OS or NVML snapshot (not per build: three threads build)."""
        source = (os_snap.t if os_snap is not None else None, nvml.t)
        if headroom is None or source == self._headroom_from:
            return
        self._headroom_from = source
        if self.headroom_gate.append(t):
            self._headroom[0].append(t)
            self._headroom[1].append(float(headroom))
            self._series_changed.add("headroom")

    def _scope_now(self, t: float) -> frozenset[int] | None:
        """This run's agents among those tracked (None: no scope, every agent); the chart sums are rebuilt and
        on_scope told when the set changed."""
        if self.scope is None:
            return None
        own = self.scope(frozenset(pid for pid, _ in self.agents))
        if own != self._own:
            self._own = own
            self._charts.invalidate()  # the sums follow this run's agents
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
            headroom, headroom_total, source = headroom_of(os_snap, nvml, views, unified)
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
                headroom_total_bytes=headroom_total,
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
                pool=pool_parts(os_snap, nvml, self.pool, views, unified),
                peers=self.peers() if self.peers is not None else (),
            )
            raised = self._raise_alerts(state)
            for alert in raised:
                if self.on_alert is not None:
                    self.on_alert(alert)  # the Monitor records it
            summary = self.summary.add(state, raised, own)
            state = replace(state, alerts=tuple(self.alerts), summary=summary)
            self.recent[-1] = _for_alerts(state)
            self.state = state
            return state

    def _raise_alerts(self, state: MonitorState) -> list[Alert]:
        """The alerts the rules raise with `state` as the newest of the recent ones (kept in self.alerts).
        One alert per condition until it has been quiet for the alert window; the severity is part of the
        condition, so a headroom warning followed by a critical shows both."""
        t, window = state.t, self.alert_window_s
        self.recent.append(state)
        while self.recent and t - self.recent[0].t > window:
            self.recent.popleft()
        raised = []
        for alert in evaluate(tuple(self.recent), self.alert_options):
            key = (alert.kind, alert.severity, alert.pid, alert.device)
            if t - self._alert_keys.get(key, -1e18) > window:
                self.alerts.append(alert)
                raised.append(alert)
            self._alert_keys[key] = t
        if len(self._alert_keys) > ALERT_KEYS_KEPT:
            # a condition quiet this long is one never seen (it raises again either way; unless the clock
            # steps back a window or more, the replay's never does); kept, every process that grew stayed
            for key, last in list(self._alert_keys.items()):
                if t - last > 2 * window:
                    del self._alert_keys[key]
        return raised


_NO_HISTORY: Mapping[str, tuple[tuple[float, ...], ...]] = MappingProxyType({})


def _for_alerts(state: MonitorState) -> MonitorState:
    """What `recent` keeps of a state for the alert rules (collectors/alerts.py, runway.py): its time, OS and
    NVML snapshots (the process table as each process's bytes: MonitorState.process_bytes), headroom, the
    agents' latest records and the kernel log of its pool; the rules read nothing else of a state but the
    newest, which they get whole. Kept whole, a minute of states at 2 Hz held
    120 copies of every 600-point chart series, and 120 summaries of up to 200 alerts each (in the monitor,
    and in each of a replay's checkpoints: its memory grew with the alerts a long recording raised)."""
    agents = tuple(replace(view, history=()) for view in state.agents)
    pool = state.pool if state.pool is not None and state.pool.kernel_log is not None else None
    os_snap, process_bytes = state.os, None
    if os_snap is not None and os_snap.processes:  # of a table the rules read each process's bytes alone
        os_snap, process_bytes = replace(os_snap, processes=()), ProcessBytes.of(os_snap.processes)
    return MonitorState(
        t=state.t,
        os=os_snap,
        nvml=state.nvml,
        agents=agents,
        buckets=(),
        alerts=(),
        unified=state.unified,
        headroom_bytes=state.headroom_bytes,
        headroom_total_bytes=state.headroom_total_bytes,
        headroom_source=state.headroom_source,
        history=_NO_HISTORY,
        pool=pool,
        replay=state.replay,
        process_bytes=process_bytes,
    )


def _columns(rows: deque, width: int) -> tuple[tuple[float, ...], ...]:
    """deque of (t, v1, ...) rows -> (times, v1s, ...) tuples; `width` columns even when empty."""
    if not rows:
        return ((),) * width
    return tuple(zip(*rows, strict=True))


def headroom_of(
    os_snap: OSSnapshot | None, nvml: NVMLSnapshot, views: tuple[AgentView, ...], unified: bool
) -> tuple[int | None, int | None, str]:
    """(free, total, source): MemAvailable out of MemTotal on unified memory; else the smallest device free
    out of that device's total (NVML, then the agents' mem_get_info: their cuda_total); host MemAvailable out
    of MemTotal when there is no GPU at all."""
    if unified:
        if os_snap is None:
            return None, None, "unknown"
        return os_snap.mem_available, os_snap.mem_total, "MemAvailable"
    with_free = [d for d in nvml.devices if d.free is not None]
    if with_free:
        tightest_device = min(with_free, key=lambda d: d.free)  # the first of equals, as min(frees) read
        return tightest_device.free, tightest_device.total, "device free (NVML)"
    tightest = tightest_agent_record(views)
    if tightest is not None:
        return tightest.cuda_free, tightest.cuda_total, "device free (agent)"
    if os_snap is not None and not nvml.devices:  # no GPU at all: host memory is the only pool
        return os_snap.mem_available, os_snap.mem_total, "MemAvailable"
    return None, None, "unknown"


def to_bytes(x: float) -> int | None:
    return to_int(x)
