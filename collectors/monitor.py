"""The live monitor: three collector threads sampling into rings, one immutable MonitorState for the UI.

* local thread, every 1/hz seconds: reads new records from every agent ring file (rescanning the directory
  every `discover_interval_s` for new agents; marking exited ones (pid gone) and reused pids (start time
  differs), dropping them after `keep_dead_s`), then /proc (meminfo/PSI/vmstat every tick through kept-open
  files, the process list at most once a second), then builds ONE state. One thread for both: a thread
  wake-up alone costs 60-80 µs of CPU on a small VM, and one build per tick instead of two.
  Of an agent's records it keeps, per device, the newest one of each tick and older ones at most
  `agent_record_hz` a second (None: the monitor's own rate; math.inf: all): what the screen uses is what is
  recorded, so a replay shows what the screen showed, and an agent at 10 Hz under a 2 Hz monitor does not
  fill the recording five times over. The agent's real rate is still measured on every record read.
  With a recorder, only the agents in the builder's scope are recorded (`memsight run`: this run's).
* NVML thread: at most once a second (the per-process lists take the driver's global lock); only while
  NVML is initialised (no library / init failed: sampled once, no thread, no retry per tick); builds a new
  state only when the snapshot differs from the last one.
* vLLM thread (only with `vllm_url`): scrapes the server's /metrics at most once a second, each request
  bounded by a short timeout, so a slow or dead server delays nothing but its own figures.
* Prometheus exporter (only with `prometheus="[HOST:]PORT"`): an HTTP server thread serving the latest
  MonitorState as /metrics (collectors/exporter.py); bound in start(), closed in stop().
After each update the thread rebuilds the MonitorState (collectors/state.py); `state()` just returns the
latest one. Idle threads sleep in Event.wait(timeout) (stop() wakes them at once), never a polling loop.
Every failure is turned into a status string or a counted drop, never an exception in the UI.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from collectors import agent_format as fmt
from collectors.agent_info import InfoFile
from collectors.agent_reader import AgentReader, discover, is_stale, skipped_files_line
from collectors.alerts import AlertOptions
from collectors.errors import CollectorError
from collectors.heap import HeapTrimmer
from collectors.nvml_collector import NVMLCollector
from collectors.os_collector import OSCollector
from collectors.pool import PoolSampler
from collectors.snapshots import AgentRecord, MonitorState
from collectors.state import StateBuilder

if TYPE_CHECKING:  # a type only: the recorder is imported where a recording is made
    from collectors.recorder import Recorder

VLLM_MAX_HZ = 1.0  # a vLLM scrape renders every metric server-side: never ask more than once a second


def _describe(exc: BaseException) -> str:
    """ "Type: message", even for an exception whose str() itself raises."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return f"{type(exc).__name__} (its message could not be formatted)"


def _check_rates(hz: float, agent_record_hz: float | None, vllm_hz: float) -> None:
    if not hz > 0:
        raise CollectorError(f"monitor rate must be > 0 Hz, got {hz}")
    if agent_record_hz is not None and not agent_record_hz > 0:
        raise CollectorError(f"agent record rate must be > 0 Hz, got {agent_record_hz}")
    if not vllm_hz > 0:
        raise CollectorError(f"vLLM scrape rate must be > 0 Hz, got {vllm_hz}")


# the engines whose log the monitor follows (vLLM's is followed by the Live screen, tui/app.py)
FOLLOWED_ENGINES = ("sglang", "ollama", "llamacpp")


class Monitor:
    def __init__(
        self,
        hz: float = 2.0,
        os_collector: OSCollector | None = None,
        nvml: NVMLCollector | None = None,
        agent_dir: str | None = None,
        record_to: str | os.PathLike | None = None,
        nvml_hz: float = 1.0,
        discover_interval_s: float = 2.0,
        keep_dead_s: float = 10.0,
        proc_root: str = "/proc",
        clock: Callable[[], float] = time.time,
        vllm_url: str | None = None,
        vllm_hz: float = 1.0,
        vllm_timeout_s: float = 0.8,
        engine_url: str | None = None,
        prometheus: str | None = None,
        alert_options: AlertOptions | None = None,
        pool_sampler: PoolSampler | None = None,
        recorder: Recorder | None = None,
        peers: Sequence[str] = (),
        agent_record_hz: float | None = None,
    ) -> None:
        _check_rates(hz, agent_record_hz, vllm_hz)
        self.hz = hz
        self.nvml_hz = min(nvml_hz, hz)
        self._clock = clock
        self._init_collectors(proc_root, os_collector, pool_sampler, nvml)
        self._init_agent_reading(agent_dir, discover_interval_s, keep_dead_s, agent_record_hz)
        self.alert_options = alert_options
        self.builder = StateBuilder(alert_options=alert_options)
        # bad input (an ftp:// URL, "host:port:x") fails here, before any thread starts
        self._init_vllm(vllm_url, vllm_hz, vllm_timeout_s, clock)
        self._init_peers(peers)
        self._init_engine(engine_url, vllm_timeout_s, clock)
        self._init_exporter(prometheus)
        self._init_recorder(record_to, recorder, hz, agent_record_hz)
        self._init_threads()

    def _init_collectors(
        self,
        proc_root: str,
        os_collector: OSCollector | None,
        pool_sampler: PoolSampler | None,
        nvml: NVMLCollector | None,
    ) -> None:
        self.proc_root = proc_root
        self.os_collector = os_collector if os_collector is not None else OSCollector(proc_root)
        # the pool's decomposition beyond meminfo: the experiment's mapped files, /dev/shm, the kernel log
        self.pool = pool_sampler if pool_sampler is not None else PoolSampler(self.os_collector.proc_root)
        self._nvml_given = nvml
        self.nvml: NVMLCollector | None = nvml

    def _init_agent_reading(
        self,
        agent_dir: str | None,
        discover_interval_s: float,
        keep_dead_s: float,
        agent_record_hz: float | None,
    ) -> None:
        self.agent_record_hz = agent_record_hz
        self._kept_t: dict[tuple[int, int, int], float] = {}  # (pid, start, device) -> newest kept record's t
        self.agent_dir = agent_dir or fmt.default_agent_dir()
        self.discover_interval_s = discover_interval_s
        self.keep_dead_s = keep_dead_s
        self._readers: dict[tuple[int, int], AgentReader] = {}
        self._info_files: dict[tuple[int, int], InfoFile] = {}
        self._info_errors: dict[tuple[int, int], str] = {}
        self._dead_since: dict[tuple[int, int], float] = {}
        self._bad_files: dict[str, str] = {}
        self._last_discover = -float("inf")

    def _init_vllm(
        self, vllm_url: str | None, vllm_hz: float, timeout_s: float, clock: Callable[[], float]
    ) -> None:
        self.vllm = None
        if vllm_url:  # the scraper (and its HTTP client) only when asked for: `memsight watch` starts lighter
            from collectors.vllm_metrics import VLLMMetrics  # noqa: PLC0415

            self.vllm = VLLMMetrics(vllm_url, timeout_s=timeout_s, clock=clock)
        self.vllm_hz = min(vllm_hz, VLLM_MAX_HZ)

    def _init_peers(self, peers: Sequence[str]) -> None:
        # --peer: other machines' exporters, each on its own thread (a bad URL fails here, before any starts)
        self.peers: list = []
        if peers:  # their scraper (prometheus_client, urllib) is imported only when a peer is watched
            from collectors.peers import PeerWatcher  # noqa: PLC0415

            self.peers = [PeerWatcher(url) for url in peers]
        if self.peers:
            self.builder.peers = lambda: tuple(w.latest for w in self.peers)

    def _init_engine(self, engine_url: str | None, timeout_s: float, clock: Callable[[], float]) -> None:
        # an engine's own endpoint (--engine-url) and the child's log followed for SGLang / llama.cpp / Ollama
        # (vLLM's log is followed by the Live screen itself, tui/app.py)
        # (imported only when asked for, as the vLLM scraper: `memsight watch` starts lighter)
        self.engine = None
        if engine_url:
            from collectors.engine_metrics import EngineMetrics  # noqa: PLC0415

            self.engine = EngineMetrics(engine_url, timeout_s=timeout_s, clock=clock)
        self.engine_follow = None  # an EngineLogFollower: follow_log(path) sets it
        # the sampling thread and a caller's sample_once (the last round after a run) may follow at once: one
        # poll at a time, or their reads of the same file interleave in the one reader
        self._follow_lock = threading.Lock()

    def _init_exporter(self, prometheus: str | None) -> None:
        self.prometheus_address = None
        if prometheus is not None:
            from collectors.exporter import parse_listen_address  # noqa: PLC0415

            self.prometheus_address = parse_listen_address(prometheus)
        self.exporter = None

    def _init_recorder(
        self,
        record_to: str | os.PathLike | None,
        recorder: Recorder | None,
        hz: float,
        agent_record_hz: float | None,
    ) -> None:
        # `recorder`: one the caller built with the Recorder's interface (collectors/flight.py's)
        if recorder is not None and record_to is not None:
            raise CollectorError("a Monitor records to one place: record_to or recorder, not both")
        self.recorder = recorder
        if record_to is not None:
            # imported only to record: `memsight watch` without --record does not hold the recorder's code
            from collectors.recorder import Recorder  # noqa: PLC0415

            agent_hz = hz if agent_record_hz is None else agent_record_hz
            self.recorder = Recorder(record_to, hz=hz, agent_hz=agent_hz)
        self._record_lock = threading.Lock()
        if self.recorder is not None:
            self.builder.on_alert = self._record_alert
            self.builder.on_scope = self._record_scope

    def _init_threads(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._thread_errors: dict[str, str] = {}  # sampling thread -> what last killed it
        self.heap = HeapTrimmer()  # the C heap's free pages back to the OS once a minute (collectors/heap.py)

    # ---- lifecycle
    def start(self) -> Monitor:
        if self._threads:
            return self
        if self.prometheus_address is not None and self.exporter is None:
            from collectors.exporter import PrometheusExporter  # noqa: PLC0415

            # bind first: a port in use is the user's error to see now, not after sampling started
            self.exporter = PrometheusExporter(self.state, *self.prometheus_address).start()
        if self.nvml is None:
            self.nvml = NVMLCollector()  # pynvml import and init happen here, not at construction
        for peer in self.peers:
            peer.start()
        self._stop.clear()
        self._sample_local()  # a first state before the UI asks (the vLLM thread scrapes at once itself)
        # overran local ticks are counted as "os": its samples are the ones skipped (agent records wait in
        # their rings and are read at the next tick)
        loops = [("os", 1.0 / self.hz, self._tick_local, False)]
        if self.nvml.active:
            loops.append(("nvml", 1.0 / self.nvml_hz, self._tick_nvml, False))
        if self.vllm is not None:
            loops.append(("vllm", 1.0 / self.vllm_hz, self.sample_vllm, True))
        if self.engine is not None:
            loops.append(("engine", 1.0 / VLLM_MAX_HZ, self.sample_engine, True))
        for name, period, fn, at_once in loops:
            thread = threading.Thread(
                target=self._supervised,
                args=(name, period, fn, at_once),
                name=f"memsight-{name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for peer in self.peers:
            peer.stop()
        for thread in self._threads:
            thread.join(timeout=5.0)
        self._threads = []
        try:
            self.sample_agents()  # the last records of agents that just exited
        except Exception:
            pass
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        close_os = getattr(self.os_collector, "close", None)
        if close_os is not None:
            close_os()  # its kept-open /proc files (a later start() reopens them)
        self.pool.close()  # the kernel log's fd (a later poll reopens it)
        # files of agents killed before their atexit ran (os._exit in fork children, SIGKILL): garbage now
        from collectors.agent import sweep_dead_files  # noqa: PLC0415  (the agent's module: only here)

        sweep_dead_files(self.agent_dir)
        if self.recorder is not None:
            with self._record_lock:
                summary = self.builder.state.summary
                if summary is not None:
                    self.recorder.summary(summary)  # the run's peaks, lowest headroom and alerts, last
                self.recorder.close()
        if self.nvml is not None and self._nvml_given is None:
            self.nvml.close()
        if self.exporter is not None:
            self.exporter.stop()
            self.exporter = None

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def state(self) -> MonitorState:
        return self.builder.state

    def set_scope(self, scope) -> None:
        """`memsight run`: scope(agent pids) -> the command's own (tui/cmd_run.py RunChild.family). Other
        agents in the directory are someone else's: their files are not read, so they are in no state, no
        recording, no summary and no --json (their processes stay listed, their memory is "other")."""
        self.builder.scope = scope  # the chart's allocated / reserved / gap sums too (collectors/state.py)

    def _in_scope(self, pid: int) -> bool:
        scope = self.builder.scope
        return scope is None or pid in scope(frozenset((pid,)))

    @property
    def recording_failed(self) -> str | None:
        """Why recording stopped (disk full, I/O error), or None while it works (or without --record)."""
        return self.recorder.failed if self.recorder is not None else None

    def _recorded(self) -> None:
        """After each append (under the record lock): a recording that stopped is said on screen."""
        if self.recorder.failed is not None and "recording" not in self.builder.status:
            self.builder.status["recording"] = self.recorder.failed

    def _supervised(self, name: str, period: float, fn: Callable[[], None], at_once: bool) -> None:
        """The sampling loop, restarted when it dies (an error its own guard let through), each restart
        counted (state.restarts, the exporter) and said on screen (source_status["threads"])."""
        while not self._stop.is_set():
            try:
                self._loop(name, period, fn, at_once)
                return
            except BaseException as exc:  # noqa: BLE001  (whatever killed it: restart, never die silently)
                if self._stop.is_set():
                    return
                restarts = self.builder.restarts
                restarts[name] = restarts.get(name, 0) + 1
                self._thread_errors[name] = _describe(exc)
                self.builder.status["threads"] = "; ".join(
                    f"{n} sampling restarted {restarts[n]}× (last: {self._thread_errors[n]})"
                    for n in sorted(restarts)
                )
                # a loop that dies at once is restarted ever more slowly (at most every 2 s), never spun
                self._stop.wait(min(2.0, 0.05 * restarts[name]))
                at_once = True

    def _record_scope(self, t: float, own: frozenset[int]) -> None:
        with self._record_lock:
            self.recorder.scope(t, own)
            self._recorded()

    def _record_alert(self, alert) -> None:
        with self._record_lock:
            self.recorder.alert(alert)
            self._recorded()

    def _loop(self, name: str, period: float, fn: Callable[[], None], at_once: bool = False) -> None:
        next_t = time.monotonic() + (0.0 if at_once else period)
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            try:
                fn()
            except Exception as exc:  # keep sampling; the status line says what broke
                self.builder.status[name] = f"{type(exc).__name__}: {exc}"
                self.builder.dropped[name] = self.builder.dropped.get(name, 0) + 1
            next_t += period
            now = time.monotonic()
            if next_t < now:  # overran: count the ticks we skip instead of bursting to catch up
                missed = int((now - next_t) / period) + 1
                self.builder.dropped[name] = self.builder.dropped.get(name, 0) + missed
                next_t += missed * period

    def _failed(self, name: str, exc: Exception) -> None:
        self.builder.status[name] = f"{type(exc).__name__}: {exc}"
        self.builder.dropped[name] = self.builder.dropped.get(name, 0) + 1

    def _tick_local(self) -> None:
        """Agents, then /proc (its include list wants the agents' pids), then one build."""
        now = self._clock()
        try:
            self._read_agents(now)
        except Exception as exc:  # one source failing must not stop the other
            self._failed("agents", exc)
        try:
            self._read_os()
        except Exception as exc:
            self._failed("os", exc)
        try:
            self._read_pool()
        except Exception as exc:
            self._failed("pool", exc)
        try:
            self.follow_engine_log()
        except Exception as exc:  # an engine's reader failing on odd text must not stop sampling
            self._failed("engine_log", exc)
        self.builder.build(self._clock())
        self.heap.maybe_trim()

    def _tick_nvml(self) -> None:
        if self._read_nvml():
            self.builder.build(self._clock())

    # ---- one round of each source
    def sample_once(self) -> MonitorState:
        """One round of every source, on the calling thread (tests; the last round after a run)."""
        self._sample_local()
        self.sample_vllm()
        self.sample_engine()
        return self.state()

    def _sample_local(self) -> None:
        self._read_nvml()
        self._read_agents(self._clock())
        self._read_os()
        self._read_pool()
        self.follow_engine_log()
        self.builder.build(self._clock())

    def sample_vllm(self) -> None:
        if self.vllm is None:
            return
        snap = self.vllm.sample()  # never raises; bounded by the scrape timeout
        self.builder.update_vllm(snap)
        if self.recorder is not None:
            with self._record_lock:
                self.recorder.vllm(snap)
                self._recorded()
        self.builder.build(self._clock())

    def sample_engine(self) -> None:
        """One scrape of --engine-url (never raises; bounded by the scrape timeout)."""
        if self.engine is None:
            return
        snap = self.engine.sample()
        self.builder.update_engine(snap)
        if self.recorder is not None:
            with self._record_lock:
                self.recorder.engine(snap)
                self._recorded()
        self.builder.build(self._clock())

    def follow_log(self, path: str | os.PathLike) -> None:
        """Follow `path` (the run's child log) for an engine's own figures, from the next local tick."""
        from collectors.engine_log_follow import EngineLogFollower  # noqa: PLC0415

        self.engine_follow = EngineLogFollower(path, engines=FOLLOWED_ENGINES)

    def follow_engine_log(self) -> None:
        """Read what the child's log added (bounded, never raises); record what an engine said anew."""
        follower = self.engine_follow
        if follower is None:
            return
        with self._follow_lock:
            followed = follower.poll()
            if followed is None:
                return
            self.builder.update_engine_log(followed)
            if self.recorder is not None:
                with self._record_lock:
                    self.recorder.engine_log(self._clock(), followed)
                    self._recorded()

    def sample_os(self) -> None:
        self._read_os()
        self.builder.build(self._clock())

    def _read_os(self) -> None:
        nvml_pids = [p.pid for d in self.builder.nvml.devices for p in d.processes]
        agent_pids = [key[0] for key in self._readers]
        try:
            snap = self.os_collector.sample(include_pids=[*nvml_pids, *agent_pids])
        except CollectorError as exc:
            self.builder.os_failed(str(exc))
            return
        self.builder.update_os(snap)
        if self.recorder is not None:
            with self._record_lock:
                self.recorder.os(snap)
                self._recorded()

    def _read_pool(self) -> None:
        """Every PoolSampler.interval_s: the experiment's mapped files, /dev/shm, the kernel log.
        The experiment's processes: the agents' and NVML's compute processes (a desktop's Xorg is not one)."""
        if not self.pool.due():
            return
        pids = {key[0] for key in self._readers}
        pids |= {p.pid for d in self.builder.nvml.devices for p in d.processes if p.kind == "compute"}
        detail = self.pool.sample(pids)
        self.builder.update_pool(detail)
        if self.recorder is not None:
            with self._record_lock:
                self.recorder.pool(detail)
                self._recorded()

    def sample_nvml(self) -> None:
        self._read_nvml()
        self.builder.build(self._clock())

    def _read_nvml(self) -> bool:
        """Sample NVML; True if the snapshot differs from the last one (apart from its time)."""
        if self.nvml is None:
            return False
        snap = self.nvml.sample()
        last = self.builder.nvml
        changed = (snap.status, snap.available, snap.devices, snap.driver_version) != (
            last.status,
            last.available,
            last.devices,
            last.driver_version,
        )
        self.builder.update_nvml(snap)
        if self.recorder is not None:
            with self._record_lock:
                self.recorder.nvml(snap)
                self._recorded()
        return changed

    def sample_agents(self) -> None:
        now = self._clock()
        self._read_agents(now)
        self.builder.build(now)

    def _read_agents(self, now: float) -> None:
        if now - self._last_discover >= self.discover_interval_s:
            self._last_discover = now
            self._discover()
        scope = self.builder.scope
        recorded = scope(frozenset(pid for pid, _ in self._readers)) if scope is not None else None
        for key, reader in list(self._readers.items()):
            result = reader.read_new()
            if result.bad:
                self._agents_status()
            kept = self._keep(key, result.records)
            process = reader.process_status(self.proc_root)
            alive = process == "alive" and not reader.closed_by_agent
            status = None
            if process == "pid reused":
                status = "pid reused"
            elif not alive:
                status = "exited"
            elif is_stale(reader, now):
                status = "stale"
            seen = tuple(r.t for r in result.records)
            self.builder.update_agent(key, kept, status=status, alive=alive, lost=result.lost, seen=seen)
            record = self.recorder is not None and (recorded is None or key[0] in recorded)
            self._read_info(key, reader, now, record)
            if record and (kept or status):
                track = self.builder.agents.get(key)
                with self._record_lock:
                    self.recorder.agent(
                        reader.pid,
                        reader.start_ticks,
                        reader.cmdline,
                        reader.path,
                        reader.hz,
                        kept,
                        track.status if track else (status or "ok"),
                        alive,
                        reader.lost,
                        track.measured_hz if track else None,
                    )
                    self._recorded()
            if not alive:
                since = self._dead_since.setdefault(key, now)
                if now - since >= self.keep_dead_s:
                    reader.close()
                    del self._readers[key]
                    self._info_files.pop(key, None)
                    self._dead_since.pop(key, None)
                    for device_key in [k for k in self._kept_t if k[:2] == key]:
                        del self._kept_t[device_key]
                    self.builder.drop_agent(key)

    def _keep(self, key: tuple[int, int], records: tuple[AgentRecord, ...]) -> tuple[AgentRecord, ...]:
        """The records kept (shown and recorded), per device: the newest read (under a rate below the
        monitor's: once 1/rate passed), and of the older ones those at least 1/rate apart and 1/rate after
        the last kept (rate: agent_record_hz, else the monitor's own; math.inf: all). At the monitor's rate
        that is the newest of each tick; a backlog read at once (a monitor started after the agent) keeps
        its history at that rate. Oldest first."""
        rate = self.hz if self.agent_record_hz is None else self.agent_record_hz
        if not records or rate == math.inf:
            return records
        period = 1.0 / rate
        kept: list[AgentRecord] = []
        newest: dict[int, float] = {}  # device -> the oldest record kept so far in this (backwards) walk
        for r in reversed(records):
            last = self._kept_t.get((*key, r.device), -math.inf)
            younger = newest.get(r.device)
            if younger is None:  # the newest: unless asked for less than the monitor's own rate
                keep = rate >= self.hz or r.t - last >= period
            else:
                keep = younger - r.t >= period and r.t - last >= period
            if keep:
                kept.append(r)
                newest[r.device] = r.t
        for device, t in newest.items():
            self._kept_t[(*key, device)] = max(self._kept_t.get((*key, device), -math.inf), t)
        return tuple(reversed(kept))

    def _read_info(self, key: tuple[int, int], reader: AgentReader, now: float, record: bool) -> None:
        """The agent's info file (plan inputs, phase peaks, hook status) when it changed: kept, recorded."""
        info_file = self._info_files.get(key)
        if info_file is None:
            info_file = self._info_files[key] = InfoFile(reader.path)
        try:
            got = info_file.read_if_changed()
        except CollectorError as exc:
            self._info_errors[key] = str(exc)
            return
        if got is None:
            return
        self._info_errors.pop(key, None)
        raw, info = got
        self.builder.update_agent_info(key, info)
        if record:
            with self._record_lock:
                self.recorder.agent_info(reader.pid, reader.start_ticks, now, raw)

    def _discover(self) -> None:
        unsafe = fmt.unsafe_dir_reason(self.agent_dir)
        if unsafe is not None:  # another user's (or a world-writable) directory: nothing in it is read
            self._skip(self.agent_dir, unsafe)
            self.builder.status["agents"] = unsafe
            self.builder.input_warnings["agents"] = unsafe
            return
        found = discover(self.agent_dir)
        present = set(found.values())
        for path in [p for p in self._bad_files if p not in present]:
            del self._bad_files[path]  # gone (or the directory made safe): no longer said
        for key, path in found.items():
            if key in self._readers:
                continue
            if fmt.process_start_ticks(key[0], self.proc_root) != key[1]:
                continue  # a file left by a dead process (or its pid reused): not a live agent
            if not self._in_scope(key[0]):
                continue  # another run's agent (memsight run): not read, recorded nor summed
            try:
                reader = AgentReader(path)  # a skipped file is tried again: made safe, it is read
            except CollectorError as exc:
                self._skip(path, str(exc))
                continue
            if (reader.pid, reader.start_ticks) != key:
                reader.close()
                self._skip(path, f"{path}: header names pid {reader.pid}, not the file name's")
                continue
            self._bad_files.pop(path, None)
            self._readers[key] = reader
            self.builder.agent_track(reader.pid, reader.start_ticks, reader.cmdline, reader.path, reader.hz)
        self._agents_status()

    def _skip(self, path: str, reason: str) -> None:
        """An agent file (or the directory) not read: kept to be said on screen, recorded once per reason."""
        if self._bad_files.get(path) == reason:
            return
        self._bad_files[path] = reason
        if self.recorder is not None:
            with self._record_lock:
                self.recorder.skip(self._clock(), "agents", path, reason)
                self._recorded()

    def _agents_status(self) -> None:
        problems = []
        bad_records = sum(r.bad for r in self._readers.values())
        if bad_records:
            problems.append(f"skipped {bad_records} bad agent record(s) (non-finite or out-of-range numbers)")
        if self._bad_files:
            problems.append(skipped_files_line(self._bad_files))
        self.builder.status["agents"] = "; ".join([f"{len(self._readers)} agent(s)", *problems])
        if self._info_errors:
            self.builder.status["agents"] += f"; {next(iter(self._info_errors.values()))}"
        if problems:
            self.builder.input_warnings["agents"] = "; ".join(problems)
        else:
            self.builder.input_warnings.pop("agents", None)
