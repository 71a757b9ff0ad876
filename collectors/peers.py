"""Another machine's headroom and buckets, read from its memsight exporter (`--peer URL`, repeatable).

The common pair: two DGX Sparks serving one model with tensor parallelism, each running memsight with
`--prometheus 0.0.0.0:9400`; each shows the other's headroom beside its own. Fleets are Grafana's business
(contrib/grafana), not this.

One daemon thread per peer fetches its /metrics every `interval_s` (2 s), each request bounded by
`timeout_s` (2 s) and the body by the /metrics fetcher's limit (collectors/vllm_metrics.py: no proxy,
8 MiB), and parses it with prometheus_client's parser (parse_prometheus_text). The UI only reads the latest
PeerSnapshot, a frozen value: a peer that is down, slow or answers garbage is one status line, never a wait
on the UI's thread.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable

from collectors.errors import CollectorError
from collectors.snapshots import PeerSnapshot
from collectors.vllm_metrics import PromScrape, VLLMMetrics, parse_prometheus_text

PEER_INTERVAL_S = 2.0
PEER_TIMEOUT_S = 2.0
# the agents' series a peer's buckets are summed from (collectors/exporter.py), and what each bucket is
BUCKET_SERIES = {
    "weights": ("memsight_agent_weights_bytes",),
    "kv": ("memsight_agent_kv_bytes",),
    "activations": ("memsight_agent_activations_bytes",),
    "overhead": ("memsight_agent_gap_bytes", "memsight_agent_non_torch_bytes"),
}


def peer_url(text: str) -> str:
    """'spark-b:9400', 'http://spark-b:9400', '.../metrics' -> the peer's /metrics URL (or CollectorError)."""
    raw = text.strip()
    if not raw:
        raise CollectorError("--peer is empty: give another memsight's exporter, e.g. http://spark-b:9400")
    full = raw if "://" in raw else "http://" + raw
    parts = urllib.parse.urlsplit(full)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CollectorError(f"--peer {text!r}: expected [http://]HOST:PORT of a memsight --prometheus")
    try:
        port = parts.port
    except ValueError:
        raise CollectorError(f"--peer {text!r}: the port is not a number") from None
    if port is None:
        raise CollectorError(f"--peer {text!r} names no port (the one its memsight --prometheus serves on)")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _one(scrape: PromScrape, name: str) -> tuple[float | None, dict[str, str]]:
    samples = scrape.values(name)
    if not samples:
        return None, {}
    return samples[0].value, dict(samples[0].labels)


def _int(value: float | None) -> int | None:
    return None if value is None or value != value else int(value)


def peer_from_scrape(url: str, scrape: PromScrape, t: float, took_s: float) -> PeerSnapshot:
    """The figures the Live screen shows of a peer, from its exporter's families."""
    if not scrape.values("memsight_state_timestamp_seconds"):
        raise CollectorError(f"{url} answers, but not as memsight (no memsight_state_timestamp_seconds)")
    headroom, labels = _one(scrape, "memsight_headroom_bytes")
    total, _ = _one(scrape, "memsight_os_mem_total_bytes")
    unified, _ = _one(scrape, "memsight_unified_memory")
    if not unified:
        devices = scrape.values("memsight_gpu_memory_total_bytes")
        total = min((s.value for s in devices), default=total)  # headroom is the tightest device's
    buckets = []
    for bucket, names in BUCKET_SERIES.items():
        samples = [s for name in names for s in scrape.values(name)]
        buckets.append((bucket, _int(sum(s.value for s in samples)) if samples else None))
    alerts = {dict(s.labels).get("severity", ""): int(s.value) for s in scrape.values("memsight_alerts")}
    stamp, _ = _one(scrape, "memsight_state_timestamp_seconds")
    return PeerSnapshot(
        url=url,
        status="ok",
        t=t,
        ok_t=t,
        took_s=took_s,
        peer_t=stamp,
        headroom_bytes=_int(headroom),
        headroom_source=labels.get("source", ""),
        total_bytes=_int(total),
        unified=bool(unified),
        buckets=tuple(buckets),
        agents=len({dict(s.labels).get("pid") for s in scrape.values("memsight_agent_allocated_bytes")}),
        warnings=alerts.get("warning", 0),
        criticals=alerts.get("critical", 0),
    )


class PeerWatcher:
    """Fetches one peer on its own thread; `latest` is always the last PeerSnapshot (never blocks)."""

    def __init__(
        self,
        url: str,
        interval_s: float = PEER_INTERVAL_S,
        timeout_s: float = PEER_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = peer_url(url)
        self.interval_s = interval_s
        self._fetcher = VLLMMetrics(self.url, timeout_s=timeout_s)  # the bounded, proxy-free /metrics GET
        self._clock = clock
        self.latest = PeerSnapshot(url=self.url, status="not reached yet", t=clock())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> PeerSnapshot:
        """One fetch (at most timeout_s); when it fails, the snapshot says why and keeps the last figures."""
        t = self._clock()
        began = time.monotonic()
        try:
            scrape = parse_prometheus_text(self._fetcher.fetch())
            snap = peer_from_scrape(self.url, scrape, t, time.monotonic() - began)
        except CollectorError as exc:
            last = self.latest
            snap = PeerSnapshot(
                url=self.url,
                status=f"down: {exc}",
                t=t,
                ok_t=last.ok_t,
                headroom_bytes=last.headroom_bytes,
                headroom_source=last.headroom_source,
                total_bytes=last.total_bytes,
                unified=last.unified,
                buckets=last.buckets,
                agents=last.agents,
            )
        self.latest = snap
        return snap

    def start(self) -> PeerWatcher:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"memsight-peer-{self.url}", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # never let a peer's oddity end the thread silently: say it
                status = f"down: {type(exc).__name__}: {exc}"
                self.latest = PeerSnapshot(url=self.url, status=status, t=self._clock())
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=0.5)  # a fetch in flight ends within its timeout, on its own
            self._thread = None
