"""A vLLM server's Prometheus `/metrics`, scraped from a URL the user gives, and the text format parser.

The parser (`parse_prometheus_text`) is prometheus_client's (`text_fd_to_metric_families`), wrapped to name
the bad line in one CollectorError, to refuse a line over MAX_LINE_CHARS, an unknown TYPE and a non-finite
timestamp, and to keep families under the names the text gives (a counter's `_total` name). It reads the
text exposition format 0.0.4: HELP / TYPE lines, escaped label values, optional timestamps, `NaN` / `+Inf`,
histograms and summaries. Linear in the body. The exporter's tests read memsight's own /metrics back with it.

`VLLMMetrics(url).sample()` never raises: a refused connection, a timeout, an HTTP error, a body that is not
the text format, or a body with HELP/TYPE lines but no samples each become a `VLLMSnapshot` whose `status`
says so (and whose `models` is empty: no zeros stand in for numbers the server did not give).

Metric names differ by vLLM version (the engine in use decides, not the package version alone):
* KV cache usage: `vllm:gpu_cache_usage_perc` (V0 and V1 up to 0.9), `vllm:kv_cache_usage_perc` (0.10+);
  a fraction, 1.0 = every KV block in use.
* prefix cache: `vllm:prefix_cache_{hits,queries}_total` (0.10+, tokens), the deprecated
  `vllm:gpu_prefix_cache_{hits,queries}_total` (V1 0.7-0.9; 0.10 still exports them), and V0's
  `vllm:gpu_prefix_cache_hit_rate` gauge.
* `vllm:cache_config_info` (a gauge of 1 whose labels carry the cache config: num_gpu_blocks, block_size,
  gpu_memory_utilization) when the server exports it.
"""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from prometheus_client.metrics_core import METRIC_TYPES
from prometheus_client.parser import text_fd_to_metric_families

from collectors.errors import CollectorError
from collectors.snapshots import VLLMModelStats, VLLMSnapshot
from planner import limits  # a stdlib-only leaf: the limits every reader shares

# A /metrics body bigger than this is not a vLLM server (vLLM's is tens of KiB); never read more.
MAX_BODY_BYTES = 8 * 2**20

# A line longer than this is not from a vLLM server (its longest, cache_config_info, is under 1 KiB). The
# bound keeps the parse linear in the body: prometheus_client's label parser re-scans a line per quote.
MAX_LINE_CHARS = 64 * 2**10

# The types a TYPE line may name (the text format's, OpenMetrics' and the legacy "untyped").
_TYPES = frozenset(METRIC_TYPES) | {"untyped"}


# --------------------------------------------------------------------------------------- text format
@dataclass(frozen=True, slots=True)
class PromSample:
    name: str  # the sample's own name (e.g. "x_bucket", "vllm:prefix_cache_queries_total")
    labels: tuple[tuple[str, str], ...]  # in the order written
    value: float  # NaN / ±inf kept as floats
    timestamp_ms: int | None = None

    def label(self, key: str) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class PromFamily:
    name: str  # as the TYPE line names it (counters: the `_total` name their samples carry)
    type: str  # "counter" | "gauge" | "histogram" | "summary" | ... | "untyped"
    help: str
    samples: tuple[PromSample, ...]


@dataclass(frozen=True, slots=True)
class PromScrape:
    families: Mapping[str, PromFamily]  # by family name, in file order
    comment_lines: int  # HELP/TYPE/other comment lines read

    @property
    def samples(self) -> tuple[PromSample, ...]:
        return tuple(s for f in self.families.values() for s in f.samples)

    def values(self, sample_name: str) -> tuple[PromSample, ...]:
        """Every sample called exactly `sample_name` (whatever family it was filed under)."""
        return tuple(s for s in self.samples if s.name == sample_name)


def _as_float(value: int | float) -> float:
    """prometheus_client gives ints for integral text; a huge one becomes ±inf, as float(text) would."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


class _Lines:
    """The body's lines for prometheus_client's parser, counting them so an error can name its line, and
    refusing what the library would accept but no server writes (an over-long line, an unknown TYPE)."""

    def __init__(self, text: str) -> None:
        self._text = text
        self.line_no = 0
        self.line = ""
        self.comments = 0

    def __iter__(self):
        for raw in self._text.split("\n"):
            self.line_no += 1
            self.line = raw
            if len(raw) > MAX_LINE_CHARS:
                raise CollectorError(
                    f"line {self.line_no}: {len(raw)} characters, over the {MAX_LINE_CHARS} a line may have"
                )
            stripped = raw.strip()
            if stripped.startswith("#"):
                self.comments += 1
                parts = stripped[1:].split(None, 2)
                if len(parts) >= 2 and parts[0] == "TYPE":
                    kind = parts[2].strip() if len(parts) > 2 else ""
                    if kind not in _TYPES:
                        raise CollectorError(
                            f"line {self.line_no}: unknown metric type {kind!r} for {parts[1]!r}"
                        )
            yield raw


def _sample(name: str, labels: Mapping[str, str], value, timestamp) -> PromSample:
    timestamp_ms = None
    if timestamp is not None:
        ms = _as_float(timestamp) * 1000
        if not math.isfinite(ms):
            raise CollectorError(f"sample {name!r} has timestamp {ms / 1000!r}: not a finite time")
        timestamp_ms = round(ms)
    return PromSample(name, tuple(labels.items()), _as_float(value), timestamp_ms)


def parse_prometheus_text(text: str) -> PromScrape:
    """Prometheus text format -> families of samples, read by prometheus_client's parser. Raises
    CollectorError naming the bad line. Linear in the text (lines are at most MAX_LINE_CHARS)."""
    lines = _Lines(text)
    found: dict[str, tuple[str, str, list[PromSample]]] = {}
    try:
        for metric in text_fd_to_metric_families(lines):
            # the library files a counter under its name less `_total` (OpenMetrics); keep the written name
            name = metric.name + "_total" if metric.type == "counter" else metric.name
            kind = "untyped" if metric.type == "unknown" else metric.type
            # the same family written in two places is one family, its samples in order
            _, _, samples = found.setdefault(name, (kind, metric.documentation, []))
            samples.extend(_sample(s.name, s.labels, s.value, s.timestamp) for s in metric.samples)
    except CollectorError:
        raise
    except (ValueError, ArithmeticError, IndexError, KeyError, TypeError) as exc:
        # how prometheus_client refuses a line (OverflowError: an integer timestamp past float range)
        detail = str(exc)[:120]
        raise CollectorError(
            f"line {lines.line_no}: cannot parse {lines.line[:80]!r}" + (f" ({detail})" if detail else "")
        ) from None
    families = {
        name: PromFamily(name, kind, help_text, tuple(samples))
        for name, (kind, help_text, samples) in found.items()
    }
    return PromScrape(MappingProxyType(families), lines.comments)


# --------------------------------------------------------------------------------------- vLLM metrics
KV_USAGE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # newest name first
PREFIX_HITS_NAMES = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREFIX_QUERIES_NAMES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
# VLLMModelStats field -> the metric names it is read from, newest first
MODEL_METRICS: Mapping[str, tuple[str, ...]] = {
    "kv_cache_usage": KV_USAGE_NAMES,
    "requests_running": ("vllm:num_requests_running",),
    "requests_waiting": ("vllm:num_requests_waiting",),
    "requests_swapped": ("vllm:num_requests_swapped",),
    "preemptions_total": ("vllm:num_preemptions_total",),
    "prefix_cache_hits": PREFIX_HITS_NAMES,
    "prefix_cache_queries": PREFIX_QUERIES_NAMES,
    "gpu_prefix_cache_hit_rate": ("vllm:gpu_prefix_cache_hit_rate",),
    "cpu_cache_usage": ("vllm:cpu_cache_usage_perc",),
}


# What each figure can be, as vLLM defines it: a usage or hit rate is a fraction (0..1; 1.0 = every KV block
# in use), everything else a count. A value outside (-3, 5, +Inf, NaN from a broken or hostile server) is not
# a measurement: it is refused (None: unknown, neither shown nor exported) and said, never passed on.
MODEL_FRACTIONS = ("kv_cache_usage", "gpu_prefix_cache_hit_rate", "cpu_cache_usage")  # VLLMModelStats
MODEL_COUNTS = (
    "requests_running", "requests_waiting", "requests_swapped", "preemptions_total", "prefix_cache_hits",
    "prefix_cache_queries",
)  # fmt: skip
CONFIG_FRACTIONS = ("gpu_memory_utilization",)  # VLLMSnapshot, from vllm:cache_config_info's labels
CONFIG_COUNTS = ("num_gpu_blocks", "block_size")
FRACTION_FIELDS = MODEL_FRACTIONS + CONFIG_FRACTIONS
COUNT_FIELDS = MODEL_COUNTS + CONFIG_COUNTS


def in_range(field: str, value: float | int) -> bool:
    """Whether a vLLM figure is one vLLM can report: a fraction within 0..1, or a whole count >= 0."""
    if field in FRACTION_FIELDS:
        return limits.finite(value, 0.0, 1.0)
    return limits.finite(value, 0, limits.MAX_MEASURED) and float(value).is_integer()


def checked(field: str, value: float | int | None, where: str, refused: list[str]) -> float | int | None:
    """`value` when in range (a count as an int), else None with one line in `refused` naming it."""
    if value is None:
        return None
    if in_range(field, value):
        return int(value) if field in COUNT_FIELDS else float(value)
    wanted = "a fraction within 0..1" if field in FRACTION_FIELDS else "a count"
    refused.append(f"{where}: {value!r} is not {wanted}")
    return None


def checked_snapshot(snap: VLLMSnapshot) -> VLLMSnapshot:
    """A snapshot built elsewhere (a replayed recording) with each out-of-range value refused as a scrape
    refuses it, so a replay never shows what the live monitor would not."""
    refused = list(snap.refused)
    models = []
    for stats in snap.models:
        where = f"{stats.model_name or 'vLLM'}{'' if stats.engine is None else f' engine {stats.engine}'}"
        changes = {
            field: checked(field, getattr(stats, field), f"{where} {field}", refused)
            for field in MODEL_FRACTIONS + MODEL_COUNTS
            if getattr(stats, field) is not None and not in_range(field, getattr(stats, field))
        }
        models.append(replace(stats, **changes) if changes else stats)
    config = {
        field: checked(field, getattr(snap, field), f"vllm:cache_config_info {field}", refused)
        for field in CONFIG_FRACTIONS + CONFIG_COUNTS
        if getattr(snap, field) is not None and not in_range(field, getattr(snap, field))
    }
    if len(refused) == len(snap.refused):
        return snap
    return replace(snap, models=tuple(models), refused=tuple(refused), **config)


def _label_number(sample: PromSample | None, key: str) -> float | None:
    value = sample.label(key) if sample is not None else None
    try:
        return float(value) if value is not None and value != "None" else None
    except ValueError:
        return math.nan  # not a number: refused by checked() as out of range


def vllm_snapshot_from_text(
    text: str, url: str = "", t: float = 0.0, scrape_s: float | None = None
) -> VLLMSnapshot:
    """A /metrics body -> VLLMSnapshot. Never raises: a malformed body becomes a status."""
    try:
        scrape = parse_prometheus_text(text)
    except Exception as exc:  # CollectorError names the line; anything else is said with its type, not raised
        detail = str(exc) if isinstance(exc, CollectorError) else f"{type(exc).__name__}: {exc}"
        return VLLMSnapshot(
            t=t,
            url=url,
            status=f"malformed /metrics from {url or 'the server'}: {detail}",
            available=False,
            scrape_s=scrape_s,
        )
    return vllm_snapshot_from_scrape(scrape, url=url, t=t, scrape_s=scrape_s)


def vllm_snapshot_from_scrape(
    scrape: PromScrape, url: str = "", t: float = 0.0, scrape_s: float | None = None
) -> VLLMSnapshot:
    all_samples = scrape.samples
    vllm_samples = [s for s in all_samples if s.name.startswith("vllm:")]
    missing = _missing_status(scrape, all_samples, vllm_samples, url or "the server")
    if missing is not None:
        return VLLMSnapshot(t=t, url=url, available=False, scrape_s=scrape_s, status=missing)
    keys, by_name = _series_by_model(vllm_samples)
    refused: list[str] = []
    models = [_model_stats(key, by_name, refused) for key in keys]
    config = next(iter(scrape.values("vllm:cache_config_info")), None)

    def label(field: str) -> float | int | None:
        return checked(field, _label_number(config, field), f"vllm:cache_config_info {field}", refused)

    return VLLMSnapshot(
        t=t,
        url=url,
        status="ok",
        available=True,
        models=tuple(models),
        num_gpu_blocks=label("num_gpu_blocks"),
        block_size=label("block_size"),
        gpu_memory_utilization=label("gpu_memory_utilization"),
        samples=len(all_samples),
        scrape_s=scrape_s,
        refused=tuple(refused),
    )


_ModelKey = tuple[str, str | None]  # (model_name, engine) labels


def _missing_status(
    scrape: PromScrape, all_samples: tuple[PromSample, ...], vllm_samples: list[PromSample], where: str
) -> str | None:
    """Why the scrape holds no vLLM figures (no samples at all, none named vllm:*), or None when it does."""
    if not all_samples:
        return f"no samples: {where} served {scrape.comment_lines} HELP/TYPE line(s) and no values"
    if not vllm_samples:
        return f"no vLLM metrics: {where} served {len(all_samples)} sample(s), none named vllm:*"
    return None


def _series_by_model(
    vllm_samples: list[PromSample],
) -> tuple[dict[_ModelKey, None], dict[str, dict[_ModelKey, float]]]:
    """One row per (model_name, engine) label pair seen on any vllm:* sample except the config info, and
    each metric name's value per row."""
    keys: dict[_ModelKey, None] = {}  # in the order first seen (a dict: linear in the samples)
    by_name: dict[str, dict[_ModelKey, float]] = {}
    for s in vllm_samples:
        if s.name == "vllm:cache_config_info":
            continue
        key = (s.label("model_name") or "", s.label("engine"))
        keys.setdefault(key, None)
        # series of one name that differ only in other labels (none of the names read below has any) add up
        by_name.setdefault(s.name, {})[key] = by_name.get(s.name, {}).get(key, 0.0) + s.value
    return keys, by_name


def _first(
    by_name: dict[str, dict[_ModelKey, float]], names: tuple[str, ...], key: _ModelKey
) -> tuple[float | None, str | None]:
    """The value of the first of `names` (newest first) that row `key` has, and that name."""
    for name in names:
        values = by_name.get(name)
        if values is not None and key in values:
            return values[key], name
    return None, None


def _model_stats(
    key: _ModelKey, by_name: dict[str, dict[_ModelKey, float]], refused: list[str]
) -> VLLMModelStats:
    """One row's figures, each out-of-range value refused (None, with a line in `refused`)."""
    where = f"{key[0] or 'vLLM'}{'' if key[1] is None else f' engine {key[1]}'}"
    figures = {}
    for field, names in MODEL_METRICS.items():
        raw, name = _first(by_name, names, key)
        figures[field] = checked(field, raw, f"{where} {name}", refused)
    hits_name = _first(by_name, PREFIX_HITS_NAMES, key)[1]
    queries_name = _first(by_name, PREFIX_QUERIES_NAMES, key)[1]
    return VLLMModelStats(
        model_name=key[0],
        engine=key[1],
        kv_cache_metric=_first(by_name, KV_USAGE_NAMES, key)[1],
        prefix_cache_metrics=tuple(n for n in (hits_name, queries_name) if n is not None),
        **figures,
    )


def normalize_url(url: str) -> str:
    """ "localhost:8000", "http://host:8000", "http://host:8000/metrics" -> a full /metrics URL."""
    parts = split_url(url, "--vllm-url", "http://localhost:8000")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def split_url(url: str, flag: str, example: str) -> urllib.parse.SplitResult:
    """A scrape URL's parts, http:// added where no scheme is written; CollectorError (one line, naming
    `flag`) for an empty one, another scheme, no host, a port that is not a number."""
    text = url.strip()
    if not text:
        raise CollectorError(f"{flag} is empty: give the server's address, e.g. {example}")
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise CollectorError(f"{flag} {url!r}: only http:// and https:// URLs are scraped")
    if not parts.hostname:
        raise CollectorError(f"{flag} {url!r} names no host")
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        raise CollectorError(f"{flag} {url!r}: the port is not a number") from None
    return parts


def fetch_text(
    url: str, timeout_s: float, accept: str, max_bytes: int, opener=None, what: str = "/metrics"
) -> str:
    """GET `url` as UTF-8 text of at most `max_bytes`, or CollectorError saying why not (refused, timeout,
    HTTP status, too big, not text). No proxy: a proxy configured for the user's web traffic must not see
    (or break) a scrape of a local server."""
    opener = opener or urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with opener.open(request, timeout=timeout_s) as response:
            body = response.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        raise CollectorError(f"HTTP {exc.code} {exc.reason} from {url}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ConnectionRefusedError):
            raise CollectorError(f"connection refused: nothing listens at {url}") from None
        if isinstance(reason, TimeoutError):
            raise CollectorError(f"timed out after {timeout_s:g} s: {url}") from None
        raise CollectorError(f"cannot reach {url}: {reason}") from None
    except TimeoutError:
        raise CollectorError(f"timed out after {timeout_s:g} s: {url}") from None
    except (OSError, ValueError) as exc:  # reset connections, bad status lines (http.client errors)
        raise CollectorError(f"cannot read {url}: {type(exc).__name__}: {exc}") from None
    if len(body) > max_bytes:
        raise CollectorError(f"{url} served more than {max_bytes // 2**20} MiB: not a {what} page")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CollectorError(f"malformed {what} from {url}: not UTF-8 text ({exc.reason})") from None


class VLLMMetrics:
    """Scrapes one vLLM /metrics URL. `sample()` blocks for at most `timeout_s` and never raises."""

    def __init__(self, url: str, timeout_s: float = 0.8, clock=time.time) -> None:
        self.url = normalize_url(url)
        if not timeout_s > 0:
            raise CollectorError(f"vLLM scrape timeout must be > 0 s, got {timeout_s}")
        self.timeout_s = timeout_s
        self._clock = clock
        # a proxy configured for the user's web traffic must not see (or break) a scrape of a local server
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def fetch(self) -> str:
        """The body, or CollectorError saying why not (refused, timeout, HTTP status, not text)."""
        return fetch_text(self.url, self.timeout_s, "text/plain;version=0.0.4", MAX_BODY_BYTES, self._opener)

    def sample(self) -> VLLMSnapshot:
        t = self._clock()
        began = time.monotonic()
        try:
            body = self.fetch()
        except CollectorError as exc:
            return VLLMSnapshot(
                t=t, url=self.url, status=str(exc), available=False, scrape_s=time.monotonic() - began
            )
        return vllm_snapshot_from_text(body, url=self.url, t=t, scrape_s=time.monotonic() - began)
