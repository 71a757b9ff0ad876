"""A serving engine's own usage endpoint, scraped from `--engine-url URL` (as --vllm-url does for vLLM).

Which engine answers is found from the body, never assumed from the port:
- SGLang `/metrics` (`--enable-metrics`; metrics/collector.py): `sglang:token_usage` (the pool's used
  fraction), `sglang:num_used_tokens`, `sglang:max_total_num_tokens` (0.5.x), `sglang:num_running_reqs`,
  `sglang:num_queue_reqs`, `sglang:cache_hit_rate`;
- llama-server `/metrics` (`--metrics`; tools/server/server.cpp): `llamacpp:kv_cache_usage_ratio`,
  `llamacpp:kv_cache_tokens`, `llamacpp:requests_processing`, `llamacpp:requests_deferred`, and `/slots`
  (JSON: one object per slot with `id`, `n_ctx`, `is_processing`) when the server exposes it;
- Ollama `/api/ps` (JSON: `models[]` with `name`, `size`, `size_vram`, `context_length`; api/types.go
  ProcessModelResponse): what each loaded model holds in all and in VRAM.
The Prometheus text goes through prometheus_client's parser (collectors.vllm_metrics.parse_prometheus_text).

`EngineMetrics(url).sample()` never raises: a refused connection, a timeout, an HTTP error or a body that is
none of these becomes a snapshot whose `status` says so, with no figures (no zeros stand in for numbers the
server did not give).
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, replace

from collectors.errors import CollectorError
from collectors.vllm_metrics import MAX_BODY_BYTES, PromScrape, fetch_text, parse_prometheus_text, split_url

OLLAMA_PS = "/api/ps"
METRICS = "/metrics"
SLOTS = "/slots"


@dataclass(frozen=True, slots=True)
class OllamaLoad:
    """One model Ollama has loaded (/api/ps)."""

    name: str
    size: int  # bytes in all (weights + KV cache + graphs as Ollama estimated them)
    size_vram: int  # of which in GPU memory
    context_length: int | None  # newer Ollama only


@dataclass(frozen=True, slots=True)
class SlotState:
    """One llama-server slot (/slots)."""

    id: int
    n_ctx: int | None
    processing: bool


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    t: float
    url: str
    kind: str  # "sglang" | "llamacpp" | "ollama" | "" (not known: status says why)
    status: str  # "ok" or why there are no figures
    available: bool
    kv_usage: float | None = None  # fraction of the KV pool in use
    kv_tokens_used: int | None = None
    kv_tokens_total: int | None = None
    running: int | None = None
    waiting: int | None = None
    cache_hit_rate: float | None = None
    loads: tuple[OllamaLoad, ...] = ()
    slots: tuple[SlotState, ...] = ()
    slots_status: str = ""  # llama-server: "" when /slots was read, else why not
    samples: int = 0
    scrape_s: float | None = None


def normalize_engine_url(url: str) -> str:
    """ "localhost:30000", "http://host:8080/metrics", "http://host:11434/api/ps" -> a full URL (the path is
    kept when given, else empty: the scraper then finds the endpoint)."""
    parts = split_url(url, "--engine-url", "http://localhost:30000")
    path = parts.path.rstrip("/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _with_path(url: str, path: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _first(scrape: PromScrape, *names: str) -> float | None:
    """The largest value among the samples of the first name present (TP ranks each export the gauge)."""
    for name in names:
        values = [s.value for s in scrape.values(name) if math.isfinite(s.value)]
        if values:
            return max(values)
    return None


def _int(x: float | None) -> int | None:
    return None if x is None or not math.isfinite(x) else int(x)


def snapshot_from_metrics(
    text: str, url: str = "", t: float = 0.0, scrape_s: float | None = None
) -> EngineSnapshot:
    """A Prometheus /metrics body (SGLang's or llama-server's) -> EngineSnapshot. Never raises."""
    try:
        scrape = parse_prometheus_text(text)
    except CollectorError as exc:
        return EngineSnapshot(
            t, url, "", f"malformed /metrics from {url or 'the server'}: {exc}", False, scrape_s=scrape_s
        )
    names = {s.name for s in scrape.samples}
    base = {"t": t, "url": url, "samples": len(scrape.samples), "scrape_s": scrape_s}
    if any(n.startswith("sglang:") for n in names):
        used, total = (
            _int(_first(scrape, "sglang:num_used_tokens")),
            _int(_first(scrape, "sglang:max_total_num_tokens")),
        )
        usage = _first(scrape, "sglang:token_usage")
        return EngineSnapshot(
            kind="sglang",
            status="ok",
            available=True,
            kv_usage=usage,
            kv_tokens_used=used,
            kv_tokens_total=total,
            running=_int(_first(scrape, "sglang:num_running_reqs")),
            waiting=_int(_first(scrape, "sglang:num_queue_reqs")),
            cache_hit_rate=_first(scrape, "sglang:cache_hit_rate"),
            **base,
        )
    if any(n.startswith("llamacpp:") for n in names):
        return EngineSnapshot(
            kind="llamacpp",
            status="ok",
            available=True,
            kv_usage=_first(scrape, "llamacpp:kv_cache_usage_ratio"),
            kv_tokens_used=_int(_first(scrape, "llamacpp:kv_cache_tokens")),
            running=_int(_first(scrape, "llamacpp:requests_processing")),
            waiting=_int(_first(scrape, "llamacpp:requests_deferred")),
            **base,
        )
    if any(n.startswith("vllm:") for n in names):
        return EngineSnapshot(
            kind="",
            status=f"{url or 'the server'} is vLLM: scrape it with --vllm-url",
            available=False,
            **base,
        )
    where = url or "the server"
    return EngineSnapshot(
        kind="",
        available=False,
        status=(
            f"no engine metrics: {where} served {len(scrape.samples)} sample(s), "
            "none named sglang:* or llamacpp:*"
        ),
        **base,
    )


def _json(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CollectorError(f"{what} is not JSON ({str(exc)[:80]})") from None


def snapshot_from_ps(
    text: str, url: str = "", t: float = 0.0, scrape_s: float | None = None
) -> EngineSnapshot:
    """An Ollama /api/ps body -> EngineSnapshot (one OllamaLoad per loaded model). Never raises."""
    try:
        body = _json(text, f"{url or 'the server'}'s /api/ps")
        models = body.get("models") if isinstance(body, dict) else None
        if not isinstance(models, list):
            raise CollectorError(f"{url or 'the server'}'s /api/ps has no models list: not Ollama")
        loads = []
        for i, m in enumerate(models):
            if not isinstance(m, dict):
                raise CollectorError(f"/api/ps model {i} is not an object")
            size, vram = m.get("size"), m.get("size_vram")
            if not (isinstance(size, int) and isinstance(vram, int)) or size < 0 or vram < 0:
                raise CollectorError(
                    f"/api/ps model {i}: size/size_vram are not byte counts ({size!r}, {vram!r})"
                )
            ctx = m.get("context_length")
            loads.append(
                OllamaLoad(
                    str(m.get("name") or m.get("model") or "?"),
                    size,
                    vram,
                    ctx if isinstance(ctx, int) and ctx > 0 else None,
                )
            )
    except CollectorError as exc:
        return EngineSnapshot(t, url, "", str(exc), False, scrape_s=scrape_s)
    status = "ok" if loads else "ok: no model loaded"
    return EngineSnapshot(
        t, url, "ollama", status, True, loads=tuple(loads), samples=len(loads), scrape_s=scrape_s
    )


def slots_from_json(text: str) -> tuple[SlotState, ...]:
    """llama-server's /slots body -> its slots; CollectorError when it is not that."""
    body = _json(text, "/slots")
    if not isinstance(body, list):
        raise CollectorError("/slots is not a list of slots")
    slots = []
    for i, s in enumerate(body):
        if not isinstance(s, dict) or not isinstance(s.get("id", i), int):
            raise CollectorError(f"/slots entry {i} is not a slot")
        n_ctx = s.get("n_ctx")
        slots.append(
            SlotState(
                int(s.get("id", i)),
                n_ctx if isinstance(n_ctx, int) else None,
                bool(s.get("is_processing", s.get("state", 0))),
            )
        )
    return tuple(slots)


class EngineMetrics:
    """Scrapes one engine URL. `sample()` blocks for at most about 2 x `timeout_s` and never raises."""

    def __init__(self, url: str, timeout_s: float = 0.8, clock=time.time) -> None:
        self.url = normalize_engine_url(url)
        if not timeout_s > 0:
            raise CollectorError(f"engine scrape timeout must be > 0 s, got {timeout_s}")
        self.timeout_s = timeout_s
        self._clock = clock
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        path = urllib.parse.urlsplit(self.url).path
        self._endpoint: str | None = path if path in (METRICS, OLLAMA_PS) else None  # found on first sample

    def _get(self, path: str, accept: str) -> str:
        return fetch_text(
            _with_path(self.url, path), self.timeout_s, accept, MAX_BODY_BYTES, self._opener, path
        )

    def sample(self) -> EngineSnapshot:
        t = self._clock()
        began = time.monotonic()
        try:
            snap = self._sample(t, began)
        except CollectorError as exc:
            snap = EngineSnapshot(t, self.url, "", str(exc), False, scrape_s=time.monotonic() - began)
        return snap

    def _sample(self, t: float, began: float) -> EngineSnapshot:
        if self._endpoint in (None, METRICS):
            try:
                text = self._get(METRICS, "text/plain;version=0.0.4")
            except CollectorError as exc:
                if self._endpoint is not None or "HTTP 404" not in str(exc):
                    raise
                text = None  # no /metrics here: Ollama answers on /api/ps
            if text is not None:
                snap = snapshot_from_metrics(text, _with_path(self.url, METRICS), t, time.monotonic() - began)
                if snap.available:
                    self._endpoint = METRICS
                if snap.kind == "llamacpp":
                    snap = self._with_slots(snap)
                return snap
        text = self._get(OLLAMA_PS, "application/json")
        snap = snapshot_from_ps(text, _with_path(self.url, OLLAMA_PS), t, time.monotonic() - began)
        if snap.available:
            self._endpoint = OLLAMA_PS
        return snap

    def _with_slots(self, snap: EngineSnapshot) -> EngineSnapshot:
        try:
            slots = slots_from_json(self._get(SLOTS, "application/json"))
        except CollectorError as exc:
            return replace(snap, slots_status=f"/slots: {exc}")
        return replace(snap, slots=slots)
