"""A vLLM server's Prometheus `/metrics`, scraped from a URL the user gives, and the text format parser.

The parser (`parse_prometheus_text`) reads the Prometheus text exposition format 0.0.4 (and the OpenMetrics
subset prometheus_client writes): `# HELP` / `# TYPE` lines, label sets with escaped quotes, backslashes and
newlines, optional timestamps, `NaN` / `+Inf` / `-Inf`, counters (`_total`, `_created`), histograms and
summaries (`_bucket`, `_sum`, `_count`). It is the same parser the exporter's tests read memsight's own
`/metrics` back with.

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
from dataclasses import dataclass
from types import MappingProxyType

from collectors.errors import CollectorError
from collectors.snapshots import VLLMModelStats, VLLMSnapshot

# A /metrics body bigger than this is not a vLLM server (vLLM's is tens of KiB); never read more.
MAX_BODY_BYTES = 8 * 2**20

# Family suffixes that belong to a TYPE'd base name (prometheus_client's and OpenMetrics' conventions).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": (),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": (),
    "untyped": (),
    "unknown": (),
}


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
    name: str
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


def parse_value(text: str, line_no: int) -> float:
    lowered = text.lower()
    if lowered in ("nan",):
        return math.nan
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    try:
        return float(text)
    except ValueError:
        raise CollectorError(f"line {line_no}: {text!r} is not a number") from None


def _parse_labels(text: str, start: int, line_no: int) -> tuple[tuple[tuple[str, str], ...], int]:
    """Parse `{k="v",...}` from text[start] == '{'; returns the labels and the index after '}'."""
    labels: list[tuple[str, str]] = []
    i = start + 1
    n = len(text)
    while True:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n:
            raise CollectorError(f"line {line_no}: unterminated label set")
        if text[i] == "}":
            return tuple(labels), i + 1
        j = i
        while j < n and (text[j].isalnum() or text[j] in "_:"):
            j += 1
        key = text[i:j]
        if not key:
            raise CollectorError(f"line {line_no}: expected a label name at column {i + 1}")
        while j < n and text[j] in " \t":
            j += 1
        if j >= n or text[j] != "=":
            raise CollectorError(f"line {line_no}: expected '=' after label {key!r}")
        j += 1
        while j < n and text[j] in " \t":
            j += 1
        if j >= n or text[j] != '"':
            raise CollectorError(f"line {line_no}: label {key!r} has no quoted value")
        j += 1
        chars: list[str] = []
        while True:
            if j >= n:
                raise CollectorError(f"line {line_no}: unterminated value of label {key!r}")
            c = text[j]
            if c == "\\" and j + 1 < n:
                nxt = text[j + 1]
                chars.append({"n": "\n", '"': '"', "\\": "\\"}.get(nxt, "\\" + nxt))
                j += 2
                continue
            if c == '"':
                j += 1
                break
            chars.append(c)
            j += 1
        labels.append((key, "".join(chars)))
        while j < n and text[j] in " \t":
            j += 1
        if j < n and text[j] == ",":
            j += 1
        elif j < n and text[j] != "}":
            raise CollectorError(f"line {line_no}: expected ',' or '}}' after label {key!r}")
        i = j


def _parse_sample(line: str, line_no: int) -> PromSample:
    i = 0
    n = len(line)
    while i < n and (line[i].isalnum() or line[i] in "_:"):
        i += 1
    name = line[:i]
    if not name or name[0].isdigit():
        raise CollectorError(f"line {line_no}: {line[:60]!r} does not start with a metric name")
    labels: tuple[tuple[str, str], ...] = ()
    if i < n and line[i] == "{":
        labels, i = _parse_labels(line, i, line_no)
    rest = line[i:].split()
    if not rest:
        raise CollectorError(f"line {line_no}: sample {name!r} has no value")
    if len(rest) > 2 and rest[2] != "#":  # OpenMetrics exemplars follow a '#'
        raise CollectorError(f"line {line_no}: unexpected text after the value of {name!r}: {rest[2]!r}")
    value = parse_value(rest[0], line_no)
    timestamp = None
    if len(rest) >= 2 and rest[1] != "#":
        try:
            timestamp = int(float(rest[1]))
        except ValueError:
            raise CollectorError(
                f"line {line_no}: timestamp {rest[1]!r} of {name!r} is not a number"
            ) from None
    return PromSample(name, labels, value, timestamp)


def _unescape_help(text: str) -> str:
    return text.replace("\\n", "\n").replace("\\\\", "\\")


def parse_prometheus_text(text: str) -> PromScrape:
    """Prometheus text format -> families of samples. Raises CollectorError naming the bad line."""
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    order: list[str] = []
    samples: dict[str, list[PromSample]] = {}
    comments = 0

    def family_of(sample_name: str) -> str:
        if sample_name in types:
            return sample_name
        for base, kind in types.items():
            for suffix in _SUFFIXES.get(kind, ()):
                if sample_name == base + suffix:
                    return base
        return sample_name

    for line_no, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            comments += 1
            parts = line[1:].strip().split(None, 2)
            if len(parts) >= 2 and parts[0] in ("HELP", "TYPE"):
                name = parts[1]
                if name not in order:
                    order.append(name)
                if parts[0] == "HELP":
                    helps[name] = _unescape_help(parts[2] if len(parts) > 2 else "")
                else:
                    kind = (parts[2] if len(parts) > 2 else "").strip().lower()
                    if kind not in _SUFFIXES:
                        raise CollectorError(f"line {line_no}: unknown metric type {kind!r} for {name!r}")
                    types[name] = kind
            continue  # other comments (and OpenMetrics' "# EOF") carry no data
        sample = _parse_sample(line, line_no)
        family = family_of(sample.name)
        if family not in order:
            order.append(family)
        samples.setdefault(family, []).append(sample)
    families = {
        name: PromFamily(name, types.get(name, "untyped"), helps.get(name, ""), tuple(samples.get(name, ())))
        for name in order
    }
    return PromScrape(MappingProxyType(families), comments)


# --------------------------------------------------------------------------------------- vLLM metrics
KV_USAGE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # newest name first
PREFIX_HITS_NAMES = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREFIX_QUERIES_NAMES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")


def _int_or_none(x: float | None) -> int | None:
    if x is None or not math.isfinite(x):
        return None
    return int(x)


def _label_int(sample: PromSample | None, key: str) -> int | None:
    value = sample.label(key) if sample is not None else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None  # "None" or a non-integer: the server did not fix a number


def _label_float(sample: PromSample | None, key: str) -> float | None:
    value = sample.label(key) if sample is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def vllm_snapshot_from_text(
    text: str, url: str = "", t: float = 0.0, scrape_s: float | None = None
) -> VLLMSnapshot:
    """A /metrics body -> VLLMSnapshot. Never raises: a malformed body becomes a status."""
    try:
        scrape = parse_prometheus_text(text)
    except CollectorError as exc:
        return VLLMSnapshot(
            t=t,
            url=url,
            status=f"malformed /metrics from {url or 'the server'}: {exc}",
            available=False,
            scrape_s=scrape_s,
        )
    return vllm_snapshot_from_scrape(scrape, url=url, t=t, scrape_s=scrape_s)


def vllm_snapshot_from_scrape(
    scrape: PromScrape, url: str = "", t: float = 0.0, scrape_s: float | None = None
) -> VLLMSnapshot:
    where = url or "the server"
    all_samples = scrape.samples
    if not all_samples:
        return VLLMSnapshot(
            t=t,
            url=url,
            available=False,
            scrape_s=scrape_s,
            status=f"no samples: {where} served {scrape.comment_lines} HELP/TYPE line(s) and no values",
        )
    vllm_samples = [s for s in all_samples if s.name.startswith("vllm:")]
    if not vllm_samples:
        return VLLMSnapshot(
            t=t,
            url=url,
            available=False,
            scrape_s=scrape_s,
            status=f"no vLLM metrics: {where} served {len(all_samples)} sample(s), none named vllm:*",
        )
    # one row per (model_name, engine) label pair seen on any vllm:* sample except the config info
    keys: list[tuple[str, str | None]] = []
    by_name: dict[str, dict[tuple[str, str | None], float]] = {}
    for s in vllm_samples:
        if s.name == "vllm:cache_config_info":
            continue
        key = (s.label("model_name") or "", s.label("engine"))
        if key not in keys:
            keys.append(key)
        # series of one name that differ only in other labels (none of the names read below has any) add up
        by_name.setdefault(s.name, {})[key] = by_name.get(s.name, {}).get(key, 0.0) + s.value

    def first(names: tuple[str, ...], key) -> tuple[float | None, str | None]:
        for name in names:
            values = by_name.get(name)
            if values is not None and key in values:
                return values[key], name
        return None, None

    models = []
    for key in keys:
        kv, kv_name = first(KV_USAGE_NAMES, key)
        hits, hits_name = first(PREFIX_HITS_NAMES, key)
        queries, queries_name = first(PREFIX_QUERIES_NAMES, key)
        models.append(
            VLLMModelStats(
                model_name=key[0],
                engine=key[1],
                kv_cache_usage=kv,
                kv_cache_metric=kv_name,
                requests_running=_int_or_none(first(("vllm:num_requests_running",), key)[0]),
                requests_waiting=_int_or_none(first(("vllm:num_requests_waiting",), key)[0]),
                requests_swapped=_int_or_none(first(("vllm:num_requests_swapped",), key)[0]),
                preemptions_total=_int_or_none(first(("vllm:num_preemptions_total",), key)[0]),
                prefix_cache_hits=_int_or_none(hits),
                prefix_cache_queries=_int_or_none(queries),
                prefix_cache_metrics=tuple(n for n in (hits_name, queries_name) if n is not None),
                gpu_prefix_cache_hit_rate=first(("vllm:gpu_prefix_cache_hit_rate",), key)[0],
                cpu_cache_usage=first(("vllm:cpu_cache_usage_perc",), key)[0],
            )
        )
    config = next(iter(scrape.values("vllm:cache_config_info")), None)
    return VLLMSnapshot(
        t=t,
        url=url,
        status="ok",
        available=True,
        models=tuple(models),
        num_gpu_blocks=_label_int(config, "num_gpu_blocks"),
        block_size=_label_int(config, "block_size"),
        gpu_memory_utilization=_label_float(config, "gpu_memory_utilization"),
        samples=len(all_samples),
        scrape_s=scrape_s,
    )


def normalize_url(url: str) -> str:
    """ "localhost:8000", "http://host:8000", "http://host:8000/metrics" -> a full /metrics URL."""
    text = url.strip()
    if not text:
        raise CollectorError("--vllm-url is empty: give the server's address, e.g. http://localhost:8000")
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise CollectorError(f"--vllm-url {url!r}: only http:// and https:// URLs are scraped")
    if not parts.hostname:
        raise CollectorError(f"--vllm-url {url!r} names no host")
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        raise CollectorError(f"--vllm-url {url!r}: the port is not a number") from None
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


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
        request = urllib.request.Request(self.url, headers={"Accept": "text/plain;version=0.0.4"})
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                body = response.read(MAX_BODY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise CollectorError(f"HTTP {exc.code} {exc.reason} from {self.url}") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):
                raise CollectorError(f"connection refused: nothing listens at {self.url}") from None
            if isinstance(reason, TimeoutError):
                raise CollectorError(f"timed out after {self.timeout_s:g} s: {self.url}") from None
            raise CollectorError(f"cannot reach {self.url}: {reason}") from None
        except TimeoutError:
            raise CollectorError(f"timed out after {self.timeout_s:g} s: {self.url}") from None
        except (OSError, ValueError) as exc:  # reset connections, bad status lines (http.client errors)
            raise CollectorError(f"cannot read {self.url}: {type(exc).__name__}: {exc}") from None
        if len(body) > MAX_BODY_BYTES:
            raise CollectorError(
                f"{self.url} served more than {MAX_BODY_BYTES // 2**20} MiB: not a /metrics page"
            )
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CollectorError(
                f"malformed /metrics from {self.url}: not UTF-8 text ({exc.reason})"
            ) from None

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
