"""Everything the Monitor samples, as Prometheus text on http://HOST:PORT/metrics.

Prometheus and Grafana do the aggregation across machines; memsight only exposes what it measured.
Rules kept by `render_metrics`:
* bytes stay bytes (`*_bytes`), cumulative counts are counters (`*_total`), percents say so;
* a value that is unknown or unsupported (None in the snapshot) is left out, never exported as 0;
* labels identify the series: gpu (NVML index), pid + device (agents), pid + name (processes),
  model_name + engine (vLLM).

The families are prometheus_client Metric objects built from the latest MonitorState by a collector
registered on a CollectorRegistry; prometheus_client writes the exposition (0.0.4 text, or OpenMetrics when
the scraper asks for it; gzip; `name[]` filters). The server is asyncio on a daemon thread (each scrape
renders the latest MonitorState, a frozen value: no lock, no work on the sampling threads), made for many
idle or slow clients: a connection is a coroutine, not a thread; the request must be complete within
REQUEST_DEADLINE_S of the connect, whole, not per read (one header line a second does not keep a client
alive); at most MAX_CONNECTIONS are held, and past that the oldest one still sending its request is shed,
so a scraper (which sends its request at once) is served while hundreds of slow or idle clients are held.
Connection errors are counted (a series), never printed. It binds 127.0.0.1 unless the user names another
host: a memory monitor should not be reachable from the network by accident.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from prometheus_client.exposition import (
    CONTENT_TYPE_PLAIN_0_0_4,
    choose_encoder,
    generate_latest,
    gzip_accepted,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from collectors.errors import CollectorError
from collectors.pool import pool_metrics
from collectors.snapshots import MonitorState, OSSnapshot, VLLMSnapshot

DEFAULT_HOST = "127.0.0.1"
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
# A scraper sends its whole request at once and reads the reply at once; nothing else needs more. Held
# connections cost a few KiB each (a coroutine, no thread), so the cap is far above what scrapers use and the
# deadlines, not the cap, are what frees them; past the cap the oldest one still sending is shed.
REQUEST_DEADLINE_S = 5.0  # from connect to the end of the request headers, whole (not per read)
RESPONSE_DEADLINE_S = 5.0  # for the client to take the reply
MAX_CONNECTIONS = 256  # held at once (a file descriptor each)
MAX_REQUEST_BYTES = 16 * 1024  # request line and headers (Prometheus sends about 300 bytes)
LISTEN_BACKLOG = 128  # connections waiting in the kernel's queue before the server accepts them
PLAIN_TEXT = [("Content-Type", "text/plain; charset=utf-8")]


def parse_listen_address(text: str) -> tuple[str, int]:
    """ "9400" -> ("127.0.0.1", 9400); "0.0.0.0:9400", "localhost:9400", "[::1]:9400" as written."""
    raw = text.strip()
    host, port_text = DEFAULT_HOST, raw
    if raw.startswith("["):
        close = raw.find("]")
        if close < 0 or raw[close + 1 : close + 2] != ":":
            raise CollectorError(f"--prometheus {text!r}: write an IPv6 host as [ADDR]:PORT")
        host, port_text = raw[1:close], raw[close + 2 :]
    elif ":" in raw:
        host, _, port_text = raw.rpartition(":")
        if ":" in host:
            raise CollectorError(f"--prometheus {text!r}: write an IPv6 host as [ADDR]:PORT")
    if not host:
        raise CollectorError(f"--prometheus {text!r}: the host before ':' is empty")
    try:
        port = int(port_text)
    except ValueError:
        raise CollectorError(
            f"--prometheus {text!r}: expected [HOST:]PORT, and {port_text!r} is no port"
        ) from None
    if not 0 <= port <= 65535:
        raise CollectorError(f"--prometheus {text!r}: port {port} is outside 0-65535")
    return host, port


# ------------------------------------------------------------------------------------------ families
class _Writer:
    """Collects prometheus_client families in order; a family with no known sample is not written at all."""

    def __init__(self) -> None:
        self.metrics: list[Metric] = []

    def family(
        self,
        name: str,
        kind: str,
        help_text: str,
        samples: Iterable[tuple[dict[str, str], float | int | None]],
    ) -> None:
        rows = [(labels, v) for labels, v in samples if v is not None]
        if not rows:
            return
        # prometheus_client names a counter family without `_total` and writes `NAME_total` itself
        metric = Metric(name.removesuffix("_total") if kind == "counter" else name, help_text, kind)
        for labels, value in rows:
            metric.add_sample(name, {k: str(v) for k, v in labels.items()}, value)
        self.metrics.append(metric)


class _Families:
    """A prometheus_client collector over a fixed list of families (generate_latest's argument)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> list[Metric]:
        return self._metrics


def render_metrics(state: MonitorState, top_processes: int = 15) -> str:
    """One MonitorState as Prometheus text (format 0.0.4), written by prometheus_client."""
    return generate_latest(_Families(state_families(state, top_processes))).decode("utf-8")


def state_families(state: MonitorState, top_processes: int = 15) -> list[Metric]:
    """Every series of one MonitorState, as prometheus_client families (None values left out)."""
    w = _Writer()
    w.family(
        "memsight_state_timestamp_seconds",
        "gauge",
        "When the monitor built the exported state (Unix time).",
        [({}, state.t)],
    )
    if state.os is not None:
        _os_families(w, state.os, top_processes)
    _headroom_families(w, state)
    _gpu_families(w, state)
    _agent_families(w, state)
    _monitor_families(w, state)
    for name, kind, help_text, samples in pool_metrics(state.pool):  # collectors/pool.py
        w.family(name, kind, help_text, samples)
    if state.vllm is not None:
        _vllm_families(w, state.vllm)
    return w.metrics


def _os_families(w: _Writer, os_snap: OSSnapshot, top_processes: int) -> None:
    src = {"source": os_snap.source}
    for name, help_text, value in (
        ("mem_total_bytes", "Host memory total (MemTotal).", os_snap.mem_total),
        (
            "mem_available_bytes",
            "Host memory available without swapping (MemAvailable).",
            os_snap.mem_available,
        ),
        ("mem_used_bytes", "MemTotal - MemAvailable.", os_snap.system_used),
        (
            "cached_bytes",
            "Page cache (Cached; psutil's cached where there is no procfs).",
            os_snap.cached,
        ),
        ("shmem_bytes", "Shared memory (Shmem).", os_snap.shmem),
        ("swap_total_bytes", "Swap total.", os_snap.swap_total),
        ("swap_free_bytes", "Swap free.", os_snap.swap_free),
    ):
        w.family(f"memsight_os_{name}", "gauge", help_text, [(src, value)])
    w.family(
        "memsight_os_memory_pressure_some_avg10_percent",
        "gauge",
        "PSI memory 'some' avg10 (percent of time some task stalled on memory).",
        [({}, os_snap.psi_some_avg10)],
    )
    w.family(
        "memsight_os_memory_pressure_full_avg10_percent",
        "gauge",
        "PSI memory 'full' avg10 (percent of time all tasks stalled on memory).",
        [({}, os_snap.psi_full_avg10)],
    )
    w.family(
        "memsight_os_oom_kill_total",
        "counter",
        "Kernel OOM kills since boot (/proc/vmstat oom_kill).",
        [({}, os_snap.oom_kill)],
    )
    top = sorted(os_snap.processes, key=lambda p: p.rss, reverse=True)[:top_processes]
    w.family(
        "memsight_process_rss_bytes",
        "gauge",
        "Resident memory of the top processes by RSS.",
        [({"pid": str(p.pid), "name": p.name}, p.rss) for p in top],
    )
    w.family(
        "memsight_process_growth_bytes",
        "gauge",
        "RSS change of the top processes over the growth window (absent while a process is newer).",
        [({"pid": str(p.pid), "name": p.name}, p.growth_bytes) for p in top],
    )
    w.family(
        "memsight_process_gpu_bytes",
        "gauge",
        "GPU memory NVML attributes to the process (all devices).",
        [({"pid": str(p.pid), "name": p.name}, p.gpu_bytes) for p in top],
    )


def _headroom_families(w: _Writer, state: MonitorState) -> None:
    w.family(
        "memsight_headroom_bytes",
        "gauge",
        "Memory a new allocation can still get: MemAvailable on unified memory, device free on discrete.",
        [({"source": state.headroom_source}, state.headroom_bytes)],
    )
    w.family(
        "memsight_unified_memory",
        "gauge",
        "1 when GPU and CPU share one memory pool (GB10, integrated).",
        [({}, 1 if state.unified else 0)],
    )
    w.family(
        "memsight_unified_gpu_held_bytes",
        "gauge",
        "Unified memory: sum of per-process NVML usage.",
        [({}, state.gpu_held_bytes)],
    )


def _gpu_families(w: _Writer, state: MonitorState) -> None:
    devices = state.nvml.devices
    gpu = [(d, {"gpu": str(d.index), "name": d.name, "uuid": d.uuid}) for d in devices]
    for field, help_text in (
        ("total", "Device memory total."),
        ("reserved", "Device memory reserved by the driver/firmware (NVML memory info v2)."),
        ("used", "Device memory used."),
        ("free", "Device memory free."),
    ):
        w.family(
            f"memsight_gpu_memory_{field}_bytes",
            "gauge",
            help_text + " Absent where NVML says Not Supported.",
            [(labels, getattr(d, field)) for d, labels in gpu],
        )
    w.family(
        "memsight_gpu_utilization_percent",
        "gauge",
        "GPU utilization (NVML).",
        [(labels, d.utilization_gpu) for d, labels in gpu],
    )
    w.family(
        "memsight_gpu_process_used_bytes",
        "gauge",
        "Per-process device memory (NVML).",
        [
            ({"gpu": str(d.index), "pid": str(p.pid), "kind": p.kind}, p.used_bytes)
            for d in devices
            for p in d.processes
        ],
    )


# The families read from each agent's latest record per device: (name, type, help, the record's value).
_AGENT_RECORD_FAMILIES = (
    (
        "allocated_bytes",
        "gauge",
        "PyTorch allocated bytes (memory_stats allocated_bytes.all.current).",
        lambda r: r.allocated,
    ),
    (
        "reserved_bytes",
        "gauge",
        "PyTorch reserved bytes (the caching allocator's segments).",
        lambda r: r.reserved,
    ),
    (
        "gap_bytes",
        "gauge",
        "Reserved - allocated: cached by PyTorch, in no tensor.",
        lambda r: r.reserved - r.allocated if r.reserved is not None and r.allocated is not None else None,
    ),
    ("peak_allocated_bytes", "gauge", "Peak allocated since the last reset.", lambda r: r.peak_allocated),
    (
        "weights_bytes",
        "gauge",
        "Bytes of the tracked model's parameters and buffers.",
        lambda r: r.weights_bytes,
    ),
    ("kv_bytes", "gauge", "Bytes of the tracked KV cache.", lambda r: r.kv_bytes),
    (
        "alloc_retries_total",
        "counter",
        "cudaMalloc failures the allocator recovered from by freeing its cache.",
        lambda r: r.alloc_retries,
    ),
    ("num_ooms_total", "counter", "Out-of-memory errors the allocator raised.", lambda r: r.num_ooms),
    (
        "cuda_free_bytes",
        "gauge",
        "torch.cuda.mem_get_info free, as the process sees it.",
        lambda r: r.cuda_free,
    ),
)


def _agent_families(w: _Writer, state: MonitorState) -> None:
    records = [(v, r) for v in state.agents for r in v.latest if r.device >= 0]
    agent_labels = [({"pid": str(v.pid), "device": str(r.device)}, r) for v, r in records]
    for name, kind, help_text, getter in _AGENT_RECORD_FAMILIES:
        w.family(
            f"memsight_agent_{name}", kind, help_text, [(labels, getter(r)) for labels, r in agent_labels]
        )
    w.family(
        "memsight_agent_rss_bytes",
        "gauge",
        "Resident memory of the process running the agent.",
        [
            ({"pid": str(v.pid)}, max(v.latest, key=lambda r: r.t).rss if v.latest else None)
            for v in state.agents
        ],
    )
    w.family(
        "memsight_agent_asked_rate_hz",
        "gauge",
        "The sampling rate the agent was asked for.",
        [({"pid": str(v.pid)}, v.hz) for v in state.agents],
    )
    w.family(
        "memsight_agent_sampled_rate_hz",
        "gauge",
        "The rate the agent's recent records show (below the asked rate when its CPU budget holds it).",
        [({"pid": str(v.pid)}, v.sampled_hz) for v in state.agents],
    )
    buckets = [({"pid": str(b.pid), "device": str(b.device)}, b) for b in state.buckets]
    w.family(
        "memsight_agent_activations_bytes",
        "gauge",
        "Measured activation peak of the current/last step.",
        [(labels, b.activations_bytes) for labels, b in buckets],
    )
    w.family(
        "memsight_agent_non_torch_bytes",
        "gauge",
        "Driver-visible process usage - PyTorch reserved (CUDA context, cuBLAS, NCCL, graphs).",
        [(labels, b.non_torch_bytes) for labels, b in buckets],
    )


def _monitor_families(w: _Writer, state: MonitorState) -> None:
    """The monitor's own health: alerts, restarted samplers, dropped samples."""
    severities: dict[str, int] = {"warning": 0, "critical": 0}
    for alert in state.alerts:
        severities[alert.severity] = severities.get(alert.severity, 0) + 1
    w.family(
        "memsight_alerts",
        "gauge",
        "Alerts in the monitor's recent list (its last 50), by severity.",
        [({"severity": s}, n) for s, n in severities.items()],
    )
    w.family(
        "memsight_sampler_restarts_total",
        "counter",
        "Times the monitor restarted a sampling thread that died (os, nvml, vllm).",
        [({"thread": name}, n) for name, n in sorted(state.restarts.items())],
    )
    w.family(
        "memsight_dropped_samples",
        "gauge",
        "Samples a source lost (overwritten unread or overran ticks).",
        [({"source": s}, n) for s, n in sorted(state.dropped.items())],
    )


def _vllm_families(w: _Writer, vllm: VLLMSnapshot) -> None:
    w.family(
        "memsight_vllm_up",
        "gauge",
        "1 when the last scrape of the vLLM server's /metrics gave vLLM figures.",
        [({"url": vllm.url}, 1 if vllm.available else 0)],
    )
    w.family(
        "memsight_vllm_values_refused",
        "gauge",
        "Values of the last vLLM scrape refused as out of range (a usage outside 0..1, inf, NaN, a "
        "negative count): left out of the series below.",
        [({"url": vllm.url}, len(vllm.refused) if vllm.available else None)],
    )
    w.family(
        "memsight_vllm_num_gpu_blocks",
        "gauge",
        "KV cache blocks vLLM allocated (cache_config_info).",
        [({"url": vllm.url}, vllm.num_gpu_blocks)],
    )
    w.family(
        "memsight_vllm_block_size_tokens",
        "gauge",
        "Tokens per KV block (cache_config_info).",
        [({"url": vllm.url}, vllm.block_size)],
    )
    rows = [
        ({"model_name": m.model_name, **({"engine": m.engine} if m.engine is not None else {})}, m)
        for m in vllm.models
    ]
    for name, kind, help_text, getter in (
        (
            "kv_cache_usage_ratio",
            "gauge",
            "Fraction of vLLM's KV cache blocks in use (1 = full).",
            lambda m: m.kv_cache_usage,
        ),
        ("requests_running", "gauge", "Requests in vLLM's running batch.", lambda m: m.requests_running),
        ("requests_waiting", "gauge", "Requests waiting in vLLM's queue.", lambda m: m.requests_waiting),
        (
            "preemptions_total",
            "counter",
            "Requests vLLM preempted (KV cache ran out).",
            lambda m: m.preemptions_total,
        ),
        ("prefix_cache_hits_total", "counter", "Prefix cache hits.", lambda m: m.prefix_cache_hits),
        (
            "prefix_cache_queries_total",
            "counter",
            "Prefix cache queries.",
            lambda m: m.prefix_cache_queries,
        ),
    ):
        w.family(f"memsight_vllm_{name}", kind, help_text, [(labels, getter(m)) for labels, m in rows])


# ------------------------------------------------------------------------------------------ server
class _StateCollector:
    """Registered on the exporter's CollectorRegistry: each scrape collects the latest state's families,
    then the exporter's own health (connections shed or refused, connection errors)."""

    def __init__(self, exporter: PrometheusExporter) -> None:
        self._exporter = exporter

    def collect(self) -> list[Metric]:
        metrics = state_families(self._exporter.state_fn(), self._exporter.top_processes)
        w = _Writer()
        w.family(
            "memsight_exporter_connections_refused_total",
            "counter",
            f"Connections closed unserved to stay under {self._exporter.max_connections} held at once: the "
            "oldest one still sending its request is shed first.",
            [({}, self._exporter.refused)],
        )
        w.family(
            "memsight_exporter_connection_errors_total",
            "counter",
            "Connections that ended in an error: request not complete by the deadline, reset, or malformed.",
            [({}, self._exporter.errors)],
        )
        return metrics + w.metrics


class _BadRequest(ValueError):
    """A request memsight does not serve; the message is the reply's status line."""


@dataclass(eq=False)
class _Connection:
    """One client connection held by the server."""

    writer: asyncio.StreamWriter
    answering: bool = False  # its request is in: never shed
    shed: bool = False  # closed by the server to make room (counted once, as refused)


class _Server:
    """An asyncio HTTP/1.x server on its own thread, made for many idle or slow clients (see the module's
    docstring). One request per connection (`Connection: close`), GET only."""

    def __init__(self, exporter: PrometheusExporter, sock: socket.socket) -> None:
        self.exporter = exporter
        self.sock = sock
        self.loop = asyncio.new_event_loop()
        # whatever asyncio would log (a callback's error) is counted as a connection error, never printed
        self.loop.set_exception_handler(lambda _loop, _context: exporter.count_error())
        self.connections: dict[_Connection, None] = {}  # oldest first (dicts keep insertion order)
        self._server: asyncio.Server | None = None
        self._started = threading.Event()
        self._failed: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="memsight-prometheus", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self._started.wait()
        if self._failed is not None:
            self.thread.join()
            raise CollectorError(f"--prometheus: cannot serve: {self._failed}")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            try:
                self._server = self.loop.run_until_complete(
                    asyncio.start_server(self._serve, sock=self.sock, limit=MAX_REQUEST_BYTES)
                )
            except Exception as exc:
                self._failed = exc
                return
            finally:
                self._started.set()
            self.loop.run_forever()
        finally:
            self.loop.close()

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(timeout=2.0)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=2.0)

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        for conn in list(self.connections):
            conn.writer.transport.abort()
        await self._server.wait_closed()

    def _admit(self) -> bool:
        """Room for one more connection: under the cap, or made by shedding the oldest one still sending
        its request (a slow or idle client; a scraper's request is in at once). False when every held
        connection is being answered. Either way past the cap, one connection is closed unserved."""
        if len(self.connections) < self.exporter.max_connections:
            return True
        self.exporter.count_refused()
        oldest = next((c for c in self.connections if not c.answering), None)
        if oldest is None:
            return False
        oldest.shed = True
        self.connections.pop(oldest)
        oldest.writer.transport.abort()
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        exporter = self.exporter
        if not self._admit():
            writer.transport.abort()
            return
        conn = _Connection(writer)
        self.connections[conn] = None
        try:
            try:
                head = await asyncio.wait_for(_read_head(reader), exporter.request_deadline_s)
                conn.answering = True
                status, headers, body = exporter.respond(*_parse_head(head))
            except _BadRequest as exc:
                exporter.count_error()
                conn.answering = True
                status, headers, body = str(exc), PLAIN_TEXT, f"memsight: {exc}\n".encode()
            writer.write(_response(status, headers, body))
            await asyncio.wait_for(writer.drain(), exporter.response_deadline_s)
            writer.close()
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            if not conn.shed:
                exporter.count_error()  # not complete by its deadline, reset, gone, or a line over the limit
            writer.transport.abort()
        finally:
            self.connections.pop(conn, None)


def _restricted(metrics: list[Metric], names: frozenset[str]) -> list[Metric]:
    """The families' samples named in `names` (prometheus_client's restricted_registry finds a collector's
    series through describe(), which a collector of a changing state cannot give: it served nothing)."""
    kept = []
    for metric in metrics:
        samples = [s for s in metric.samples if s.name in names]
        if samples:
            copy = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            copy.samples = samples
            kept.append(copy)
    return kept


async def _read_head(reader: asyncio.StreamReader) -> list[bytes]:
    """The request line and header lines, up to the empty line that ends them."""
    lines: list[bytes] = []
    size = 0
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:  # one line over MAX_REQUEST_BYTES
            raise _BadRequest("431 Request Header Fields Too Large") from None
        size += len(line)
        if size > MAX_REQUEST_BYTES:
            raise _BadRequest("431 Request Header Fields Too Large")
        if line in (b"\r\n", b"\n"):
            if lines:
                return lines
            continue  # empty lines before the request line are allowed (RFC 9112 2.2)
        lines.append(line.rstrip(b"\r\n"))


def _parse_head(lines: list[bytes]) -> tuple[str, str, dict[str, str]]:
    """(method, target, headers with lower-case names) of one request head."""
    try:
        method, target, version = lines[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise _BadRequest("400 Bad Request") from None
    if not version.startswith("HTTP/1."):
        raise _BadRequest("505 HTTP Version Not Supported")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip():
            raise _BadRequest("400 Bad Request")
        headers[name.lower()] = value.strip()
    return method, target, headers


def _response(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Server: memsight", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _listening_socket(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        family = socket.AF_INET  # a host name: resolved by bind()
    sock = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


class PrometheusExporter:
    """Serves `render_metrics(state_fn())` at http://host:port/metrics; port 0 picks a free one."""

    def __init__(
        self,
        state_fn: Callable[[], MonitorState],
        host: str = DEFAULT_HOST,
        port: int = 0,
        top_processes: int = 15,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        response_deadline_s: float = RESPONSE_DEADLINE_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.state_fn = state_fn
        self.request_deadline_s = request_deadline_s
        self.response_deadline_s = response_deadline_s
        self.max_connections = max_connections
        self.host = host
        self.port = port
        self.top_processes = top_processes
        self.refused = 0  # connections closed unserved to stay under max_connections
        self.errors = 0  # connections that ended in an error (deadline, reset, malformed)
        self.lock = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StateCollector(self))
        self._server: _Server | None = None

    def count_error(self) -> None:
        with self.lock:
            self.errors += 1

    def count_refused(self) -> None:
        with self.lock:
            self.refused += 1

    def render(self) -> str:
        """What a scrape gets: the state's series and the exporter's own counters (0.0.4 text)."""
        return generate_latest(self.registry).decode("utf-8")

    def respond(self, method: str, target: str, headers: dict[str, str]) -> tuple[str, list, bytes]:
        """(status, headers, body) for one request: prometheus_client's content negotiation (0.0.4 text or
        OpenMetrics, gzip, `name[]` filters) for GET /metrics, a 404 or 405 for anything else."""
        if method != "GET":
            return "405 Method Not Allowed", [*PLAIN_TEXT, ("Allow", "GET")], b"memsight serves GET only\n"
        url = urlsplit(target)
        if url.path != "/metrics":
            return "404 Not Found", PLAIN_TEXT, b"memsight serves /metrics only\n"
        try:
            encoder, content_type = choose_encoder(headers.get("accept", ""))
            metrics = list(self.registry.collect())
            names = parse_qs(url.query).get("name[]")
            if names:  # Prometheus' `name[]` (federation): only these series
                metrics = _restricted(metrics, frozenset(names))
            body = encoder(_Families(metrics))
        except Exception as exc:  # a bug in rendering: say so to the scraper, keep serving
            error = f"memsight: {type(exc).__name__}: {exc}\n"
            return "500 Internal Server Error", PLAIN_TEXT, error.encode()
        out = [("Content-Type", content_type)]
        if gzip_accepted(headers.get("accept-encoding", "")):
            body = gzip.compress(body)
            out.append(("Content-Encoding", "gzip"))
        return "200 OK", out, body

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) actually bound (the real port when 0 was asked)."""
        if self._server is None:
            return self.host, self.port
        return self.host, self._server.sock.getsockname()[1]

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    @property
    def socket_address(self) -> tuple:
        """What the listening socket is bound to (the resolved address)."""
        assert self._server is not None
        return self._server.sock.getsockname()

    def start(self) -> PrometheusExporter:
        if self._server is not None:
            return self
        try:
            sock = _listening_socket(self.host, self.port)
        except OSError as exc:
            raise CollectorError(
                f"--prometheus: cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self._server = _Server(self, sock)
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.stop()
        self._server = None

    def __enter__(self) -> PrometheusExporter:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
