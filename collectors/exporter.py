"""Everything the Monitor samples, as Prometheus text on http://HOST:PORT/metrics.

Prometheus and Grafana do the aggregation across machines; memsight only exposes what it measured.
Rules kept by `render_metrics`:
* bytes stay bytes (`*_bytes`), cumulative counts are counters (`*_total`), percents say so;
* a value that is unknown or unsupported (None in the snapshot) is left out, never exported as 0;
* labels identify the series: gpu (NVML index), pid + device (agents), pid + name (processes),
  model_name + engine (vLLM).

The families are prometheus_client Metric objects built from the latest MonitorState by a collector
registered on a CollectorRegistry; prometheus_client writes the exposition (0.0.4 text, or OpenMetrics when
the scraper asks for it) through its MetricsHandler. The server is a ThreadingHTTPServer on a daemon thread
(each scrape renders the latest MonitorState, a frozen value: no lock, no work on the sampling threads),
with a per-connection timeout (CONNECTION_TIMEOUT_S), at most MAX_CONNECTIONS handled at once (more are
closed at once and counted), and socket errors counted, never printed. It binds 127.0.0.1 unless the user
names another host: a memory monitor should not be reachable from the network by accident.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable, Iterable
from http.server import ThreadingHTTPServer

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, MetricsHandler, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from collectors.errors import CollectorError
from collectors.pool import pool_metrics
from collectors.snapshots import MonitorState

DEFAULT_HOST = "127.0.0.1"
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
CONNECTION_TIMEOUT_S = 5.0  # a connection idle this long (no request line, no header) is closed
MAX_CONNECTIONS = 16  # handled at once; Prometheus scrapes one at a time per target


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
    os_snap = state.os
    if os_snap is not None:
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

    records = [(v, r) for v in state.agents for r in v.latest if r.device >= 0]
    agent_labels = [({"pid": str(v.pid), "device": str(r.device)}, r) for v, r in records]
    for name, kind, help_text, getter in (
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
            lambda r: (
                r.reserved - r.allocated if r.reserved is not None and r.allocated is not None else None
            ),
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
    ):
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

    for name, kind, help_text, samples in pool_metrics(state.pool):  # collectors/pool.py
        w.family(name, kind, help_text, samples)

    vllm = state.vllm
    if vllm is not None:
        w.family(
            "memsight_vllm_up",
            "gauge",
            "1 when the last scrape of the vLLM server's /metrics gave vLLM figures.",
            [({"url": vllm.url}, 1 if vllm.available else 0)],
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
    return w.metrics


# ------------------------------------------------------------------------------------------ server
class _StateCollector:
    """Registered on the exporter's CollectorRegistry: each scrape collects the latest state's families,
    then the exporter's own health (connections refused, connection errors)."""

    def __init__(self, exporter: PrometheusExporter) -> None:
        self._exporter = exporter

    def collect(self) -> list[Metric]:
        metrics = state_families(self._exporter.state_fn(), self._exporter.top_processes)
        w = _Writer()
        w.family(
            "memsight_exporter_connections_refused_total",
            "counter",
            f"Connections closed unserved because {MAX_CONNECTIONS} were already being handled.",
            [({}, self._exporter.refused)],
        )
        w.family(
            "memsight_exporter_connection_errors_total",
            "counter",
            "Connections that ended in an error: timed out idle, reset, or a malformed request.",
            [({}, self._exporter.errors)],
        )
        return metrics + w.metrics


class _Handler(MetricsHandler):
    server_version = "memsight"
    timeout = CONNECTION_TIMEOUT_S  # set on each connection's socket: an idle client is dropped

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        path = self.path.split("?", 1)[0]
        if path != "/metrics":
            self._send(404, "text/plain; charset=utf-8", b"memsight serves /metrics only\n")
            return
        try:
            super().do_GET()  # prometheus_client: content negotiation, gzip, name[] filters
        except (OSError, ValueError):
            raise  # the connection broke (or timed out): the server counts it
        except Exception as exc:  # a bug in rendering: say so to the scraper, keep serving
            self._send(500, "text/plain; charset=utf-8", f"memsight: {type(exc).__name__}: {exc}\n".encode())

    def log_error(self, format: str, *args) -> None:  # noqa: A002  (http.server's signature)
        self.server.exporter.count_error()  # type: ignore[attr-defined]  (a timeout, a bad request line)

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64  # a burst waits in the kernel's queue, then the cap below decides

    def __init__(self, address: tuple[str, int], exporter: PrometheusExporter) -> None:
        try:
            family_v6 = ipaddress.ip_address(address[0]).version == 6
        except ValueError:
            family_v6 = False  # a host name: resolved by bind()
        if family_v6:
            import socket  # noqa: PLC0415

            self.address_family = socket.AF_INET6
        self.exporter = exporter
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        handler = type(
            "_Handler", (_Handler,), {"registry": exporter.registry, "timeout": exporter.timeout_s}
        )
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):  # a flood of connections never grows the threads
            with self.exporter.lock:
                self.exporter.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        self.exporter.count_error()  # a reset, a client gone: counted (a series), never printed


class PrometheusExporter:
    """Serves `render_metrics(state_fn())` at http://host:port/metrics; port 0 picks a free one."""

    def __init__(
        self,
        state_fn: Callable[[], MonitorState],
        host: str = DEFAULT_HOST,
        port: int = 0,
        top_processes: int = 15,
        connection_timeout_s: float = CONNECTION_TIMEOUT_S,
    ) -> None:
        self.state_fn = state_fn
        self.timeout_s = connection_timeout_s
        self.host = host
        self.port = port
        self.top_processes = top_processes
        self.refused = 0  # connections closed unserved (MAX_CONNECTIONS busy)
        self.errors = 0  # connections that ended in an error (reset, timeout)
        self.lock = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StateCollector(self))
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def count_error(self) -> None:
        with self.lock:
            self.errors += 1

    def render(self) -> str:
        """What a scrape gets: the state's series and the exporter's own counters (0.0.4 text)."""
        return generate_latest(self.registry).decode("utf-8")

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) actually bound (the real port when 0 was asked)."""
        if self._server is None:
            return self.host, self.port
        return self.host, self._server.server_address[1]

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    def start(self) -> PrometheusExporter:
        if self._server is not None:
            return self
        try:
            self._server = _Server((self.host, self.port), self)
        except OSError as exc:
            raise CollectorError(
                f"--prometheus: cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="memsight-prometheus",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._server = None
        self._thread = None

    def __enter__(self) -> PrometheusExporter:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
