"""Read a vLLM startup log (0.6 .. now): the model, the engine arguments and every memory figure vLLM logs.

Pure text parsing, stdlib only. Accepts what people paste: V0 and V1 wordings, "(EngineCore_DP0 pid=..)",
"(VllmWorkerProcess pid=..)" and "(Worker_TP1 pid=..)" prefixes with TP ranks' lines interleaved, docker
compose ("svc-1  | ") and journald ("Mon 18 14:14:59 host python3[123]: ") prefixes, ANSI colours, the
timestamped "INFO 01-30 03:18:12 [file.py:123]" header of every vLLM version, and the shell line
`vllm serve MODEL ...` when the log starts with it. Every figure keeps the line number it was read from.

LogReader is incremental: feed() it lines as they arrive (the Live screen reads a child's log while it
streams) and ask result() at any moment; parse_log() reads a whole text at once.

The wordings come from vLLM's sources (file names as they appear in the logs' headers):
- V0 0.6.4: worker.py "Memory profiling results: total_gpu_memory=.. initial_memory_usage=..
  peak_torch_memory=..
  memory_usage_post_profile=.. non_torch_memory=.. kv_cache_size=.. gpu_memory_utilization=.."
- V0 0.6.5 dev: a table, one "name  value" per line ("total_gpu_memory     79.22GiB", ...)
- V0 0.6.6 - 0.10: worker.py "the current vLLM instance can use total_gpu_memory (T) x gpu_memory_utilization
  (u) = R" and "model weights take W; non_torch_memory takes N; PyTorch activation peak memory takes A; the
  rest
  of the memory reserved for KV Cache is K"; executor "# GPU blocks: B" (0.6) / "# CUDA blocks" (0.7) /
  "# cuda blocks" (0.8+), "Maximum concurrency for X tokens per request: Y.YYx"
- V1: gpu_model_runner "Model loading took W GiB", gpu_worker "Available KV cache memory: K GiB",
  kv_cache_utils "GPU KV cache size: N tokens" / "# GPU blocks: B" (0.7), "Maximum concurrency ...",
  0.18+ "Estimated CUDA graph memory: G GiB total", 0.27+ "Free memory on device (f/T GiB) on startup.
  Desired GPU memory utilization is (u, R GiB)"; 0.11 - 0.26 (DEBUG from 0.19) the same summary with "Actual
  usage is W GiB for weight, A GiB for peak activation, N GiB for non-torch memory, and G GiB for CUDAGraph
  memory", and at DEBUG "Memory profiling takes S seconds. Total non KV cache memory: T GiB; torch peak memory
  increase: A GiB; non-torch forward increase memory: N GiB; weights memory: W GiB".
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner import limits
from planner.engines.base import ANSI, Figure, FigureLookups, LineReader, plausible, read_all

GB = 10**9

# Stages a startup goes through, in order; a log that stops before "pool" died (or was cut) there.
STAGES = ("start", "config", "weights", "profiling", "pool", "graphs", "ready")
STAGE_WORDS = {
    "start": "at start-up, before it printed its engine configuration",
    "config": "after the engine configuration, before the weights finished loading",
    "weights": "after loading the weights, during the memory profiling run",
    "profiling": "after the memory profile, before the KV cache was sized",
    "pool": "after sizing the KV cache, during CUDA graph capture / warm-up",
    "graphs": "after CUDA graph capture, before the server was ready",
    "ready": "the server was ready",
}

_HEADER = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+"
    r"\[?(?P<file>[\w./-]+\.py):(?P<lineno>\d+)\]\s?(?P<msg>.*)$"
)
_WORKER = re.compile(
    r"\((?P<who>[A-Za-z_]+?)(?:_DP(?P<dp>\d+))?(?:_PP(?P<pp>\d+))?(?:_TP(?P<tp>\d+))?\s+pid=(?P<pid>\d+)\)"
)
_NUM = r"(-?[\d.]+)"
# The figures vLLM can log below zero: the pool ("Available KV cache memory: -2.14 GiB", vllm #23278; V0's
# "reserved for KV Cache is -0.94GiB"), V0's non-torch growth after its baseline ("non_torch_memory takes
# -0.51GiB") and the graph capture's change of free memory ("Graph capturing finished in 3 secs, took -0.22
# GiB", in public logs). Every other one is a size or a count, 0 or more (planner.engines.base.plausible).
SIGNED_FIGURES = frozenset({"kv_pool", "non_torch", "cudagraph_actual"})


@dataclass(frozen=True, slots=True)
class VLLMLog(FigureLookups):
    """What a vLLM startup log says. `figures` maps a stable name to every occurrence (first one first)."""

    is_vllm: bool
    version: str | None
    engine: str | None  # "V0" | "V1" | None (not stated)
    model: str | None
    config: Mapping[str, str]  # key=value pairs of the "Initializing ... with config:" line
    args: Mapping[str, Any]  # "non-default args: {...}" (0.10+), or the `vllm serve` command line's flags
    figures: Mapping[str, tuple[Figure, ...]]
    stage: str  # the last of STAGES reached
    error: str | None  # the first error line (what killed it), when one is there
    error_line: int | None
    lines: int
    notes: tuple[str, ...] = ()
    # figures no vLLM prints (a negative size or count, one past the int64 range): "line N: TEXT UNIT is ...";
    # not in `figures`; explain refuses the log naming the first (the live follower just leaves them out)
    refused: tuple[str, ...] = ()
    # the line saying the sampler runs FlashInfer's top-k/top-p ("Using FlashInfer for top-p & top-k
    # sampling.": TopKTopPSampler.__init__, v0.10.0 topk_topp_sampler.py:49, v0.11.0 :56, v0.24.0 :55)
    flashinfer_sampler_line: int | None = None
    # What the log says about how vLLM ran, as opposed to what it measured: name -> (value, line). See FACTS.
    facts: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def fact(self, name: str) -> str | None:
        found = self.facts.get(name)
        return None if found is None else found[0]

    # The engine settings, from the config line, the non-default args or the command line (in that order).
    def setting(self, *names: str) -> str | None:
        for name in names:
            if name in self.config and self.config[name] not in ("None", ""):
                return self.config[name]
        for name in names:
            if name in self.args and self.args[name] is not None:
                return str(self.args[name])
        return None

    @property
    def finished(self) -> bool:
        return STAGES.index(self.stage) >= STAGES.index("pool")


@dataclass
class _State:
    version: str | None = None
    engine: str | None = None
    model: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, list[Figure]] = field(default_factory=dict)
    stage: str = "start"
    error: str | None = None
    error_line: int | None = None
    lines: int = 0
    vllm_lines: int = 0
    engine_hint: str | None = (
        None  # from which of vLLM's files wrote the lines (V0 worker.py, V1 gpu_worker.py)
    )
    table_pending: bool = False  # inside the 0.6.5-dev "Memory profiling results:" table
    notes: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    flashinfer_sampler_line: int | None = None
    facts: dict[str, tuple[str, int]] = field(default_factory=dict)


def strip_line(raw: str) -> tuple[str, str]:
    """(message, rank) of one raw log line: ANSI colours, container/journald prefixes, the worker prefix and
    the level/timestamp/file header removed. Lines without a vLLM header come back as they are (stripped)."""
    line = ANSI.sub("", raw).rstrip("\r\n")
    rank = ""
    worker = _WORKER.search(line)
    if worker and worker.group("who") not in ("APIServer",):
        who = worker.group("who")
        rank = f"{who} pid={worker.group('pid')}" if who == "VllmWorkerProcess" else who
        if worker.group("tp") is not None or worker.group("pp") is not None:
            rank = (
                "Worker"
                + (f"_PP{worker.group('pp')}" if worker.group("pp") is not None else "")
                + (f"_TP{worker.group('tp')}" if worker.group("tp") is not None else "")
            )
    header = _HEADER.search(line)
    if header:
        return header.group("msg").strip(), rank
    return line.strip(), rank


def _config_pairs(text: str) -> dict[str, str]:
    """key=value pairs of vLLM's config line; quoted values keep commas, nested (...)/{...}/[...] too."""
    pairs: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        m = re.compile(r"\s*([A-Za-z_][\w]*)=").match(text, i)
        if not m:
            nxt = text.find(",", i)
            if nxt < 0:
                break
            i = nxt + 1
            continue
        key = m.group(1)
        j = m.end()
        depth = 0
        quote = ""
        k = j
        while k < n:
            ch = text[k]
            if quote:
                if ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == "," and depth <= 0:
                break
            k += 1
        if quote or depth > 0:
            break  # the line was cut inside this value (a pasted excerpt): keep only the whole values
        value = text[j:k].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        pairs.setdefault(key, value)
        i = k + 1
    return pairs


def _serve_args(command: str) -> tuple[str | None, dict[str, Any]]:
    """The model and flags of a `vllm serve MODEL --flag value` (or `python -m vllm.entrypoints...`) line."""
    try:
        words = shlex.split(command.replace("\\\n", " "))
    except ValueError:
        words = command.split()
    model = None
    args: dict[str, Any] = {}
    if "serve" in words:
        rest = words[words.index("serve") + 1 :]
        if rest and not rest[0].startswith("-"):
            model = rest[0]
            rest = rest[1:]
    else:
        rest = words
    i = 0
    while i < len(rest):
        word = rest[i]
        if word.startswith("--"):
            key, eq, value = word[2:].partition("=")
            key = key.replace("-", "_")
            if eq:
                args[key] = value
            elif i + 1 < len(rest) and not rest[i + 1].startswith("-"):
                args[key] = rest[i + 1]
                i += 1
            else:
                args[key] = True
        elif word in ("-tp", "-pp", "-q") and i + 1 < len(rest):
            args[
                {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size", "-q": "quantization"}[word]
            ] = rest[i + 1]
            i += 1
        i += 1
    if model is None and "model" in args:
        model = str(args["model"])
    return model, args


_STAGE_MARKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("config", re.compile(r"Initializing (?:a V[01] |an )?LLM engine|non-default args:|"
                          r"Resolved architecture")),
    ("weights", re.compile(r"Loading (?:model )?weights took|Model loading took|model weights take")),
    ("profiling", re.compile(r"Memory profiling|Available KV cache memory|available_kv_cache_memory|"
                             r"Estimated CUDA graph memory")),
    ("pool", re.compile(r"(?:# |^)(?:GPU|CUDA|cuda) blocks:|GPU KV cache size:|Maximum concurrency for")),
    ("graphs", re.compile(r"Graph capturing finished|Capturing cudagraphs.*100%|CUDA graph pool memory|"
                          r"Desired GPU memory utilization is")),
    ("ready", re.compile(r"Application startup complete|Starting vLLM API server|init engine .* took|"
                         r"Uvicorn running on|Available routes are")),
)  # fmt: skip

_ERROR = re.compile(
    r"(?:^|\s)((?:torch\.)?(?:cuda\.)?OutOfMemoryError:.*|ValueError:.*|RuntimeError:.*|AssertionError:.*|"
    r"No available memory for the cache blocks.*|Engine core initialization failed.*|CUDA out of memory.*)"
)

# errors only vLLM raises (a log of nothing else is still a vLLM log: it died at start-up)
_VLLM_ERROR = re.compile(
    r"Free memory on device|No available memory for the cache blocks|gpu_memory_utilization|"
    r"Engine core initialization failed|KV cache|max_model_len"
)

# (name, unit, pattern with one group per figure, names of the groups' figures)
_FIGURES: tuple[tuple[re.Pattern[str], tuple[tuple[str, str], ...]], ...] = (
    (re.compile(rf"total_gpu_memory \({_NUM}GiB\) x gpu_memory_utilization \({_NUM}\) = {_NUM}GiB"),
     (("total", "GiB"), ("utilization", ""), ("requested", "GiB"))),
    (re.compile(rf"model weights take {_NUM}GiB; non_torch_memory takes {_NUM}GiB; PyTorch activation peak "
                rf"memory takes {_NUM}GiB; the rest of the memory reserved for KV Cache is {_NUM}GiB"),
     (("weights", "GiB"), ("non_torch", "GiB"), ("activation", "GiB"), ("kv_pool", "GiB"))),
    (re.compile(rf"Memory profiling results: total_gpu_memory={_NUM}GiB initial_memory_usage={_NUM}GiB "
                rf"peak_torch_memory={_NUM}GiB memory_usage_post_profile={_NUM}GiB "
                rf"non_torch_memory={_NUM}GiB "
                rf"kv_cache_size={_NUM}GiB gpu_memory_utilization={_NUM}"),
     (("total", "GiB"), ("initial_usage", "GiB"), ("torch_peak", "GiB"), ("usage_post_profile", "GiB"),
      ("non_torch", "GiB"), ("kv_pool", "GiB"), ("utilization", ""))),
    (re.compile(rf"Loading model weights took {_NUM} (GB|GiB)"), (("weights", "unit"),)),
    (re.compile(rf"Model loading took {_NUM} ?(GiB|GB)"), (("weights", "unit"),)),
    (re.compile(rf"Available KV cache memory: {_NUM} ?GiB"), (("kv_pool", "GiB"),)),
    (re.compile(rf"Estimated CUDA graph memory: {_NUM} ?GiB"), (("cudagraph_estimate", "GiB"),)),
    # 0.20+ after the pool (gpu_worker.py): "The current --gpu-memory-utilization=0.9200 is equivalent to ..."
    (re.compile(rf"The current --gpu-memory-utilization={_NUM} is equivalent to"), (("utilization", ""),)),
    (re.compile(rf"Free memory on device \({_NUM}/{_NUM} GiB\) on startup\. "
                rf"Desired GPU memory utilization is "
                rf"\({_NUM}, {_NUM} GiB\)"),
     (("free_at_start", "GiB"), ("total", "GiB"), ("utilization", ""), ("requested", "GiB"))),
    (re.compile(rf"Actual usage is {_NUM} GiB for consumed memory \(weights \+ non-torch\), "
                rf"{_NUM} GiB for peak "
                rf"activation, and {_NUM} GiB for CUDAGraph memory"),
     (("consumed", "GiB"), ("activation", "GiB"), ("cudagraph_actual", "GiB"))),
    # 0.11 - 0.26: the same summary with the weights and non-torch apart (gpu_worker.py, DEBUG from 0.19)
    (re.compile(rf"Actual usage is {_NUM} GiB for weight, {_NUM} GiB for peak activation, {_NUM} GiB for "
                rf"non-torch memory, and {_NUM} GiB for CUDAGraph memory"),
     (("weights", "GiB"), ("activation", "GiB"), ("non_torch", "GiB"), ("cudagraph_actual", "GiB"))),
    # V1 0.10+ at DEBUG (MemoryProfilingResult.__repr__, gpu_worker.py): the profile's own breakdown
    (re.compile(rf"Total non KV cache memory: {_NUM} ?GiB; torch peak memory increase: {_NUM} ?GiB; "
                rf"non-torch forward increase memory: {_NUM} ?GiB; weights memory: {_NUM} ?GiB"),
     (("non_kv", "GiB"), ("activation", "GiB"), ("non_torch", "GiB"), ("weights", "GiB"))),
    (re.compile(rf"CUDA graph pool memory: {_NUM} GiB \(actual\), {_NUM} GiB \(estimated\)"),
     (("cudagraph_actual", "GiB"), ("cudagraph_estimate", "GiB"))),
    (re.compile(rf"Graph capturing finished in \d+ secs?, took {_NUM} GiB"), (("cudagraph_actual", "GiB"),)),
    # "# GPU blocks: B, # CPU blocks: C"; pasted into a GitHub comment the "# " can be lost (vllm #10517)
    (re.compile(r"(?:# |^)(?:GPU|CUDA|cuda) blocks: (\d+)"), (("num_blocks", "blocks"),)),
    (re.compile(r"GPU KV cache size: ([\d,]+) tokens"), (("kv_tokens", "tokens"),)),
    (re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
     (("max_model_len", "tokens"), ("max_concurrency", "x"))),
)  # fmt: skip

# The 0.6.5-dev table ("Memory profiling results:" then one "name  value" per line).
_TABLE = {
    "total_gpu_memory": ("total", "GiB"),
    "gpu_memory_utilization": ("utilization", ""),
    "the current vLLM instance can use": ("requested", "GiB"),
    "model weights take": ("weights", "GiB"),
    "non_torch_memory": ("non_torch", "GiB"),
    "PyTorch activation peak memory": ("activation", "GiB"),
    "available_kv_cache_memory": ("kv_pool", "GiB"),
}
_TABLE_ROW = re.compile(r"^(?P<name>[A-Za-z_][\w ]*?)\s{2,}(?P<value>-?[\d.]+)(?:GiB)?\s*$")

# the files whose log lines say which engine wrote them
_V1_FILES = {
    "gpu_model_runner.py": "V1", "gpu_worker.py": "V1", "kv_cache_utils.py": "V1", "core.py": "V1",
    "worker.py": "V0", "model_runner.py": "V0", "executor_base.py": "V0", "llm_engine.py": "V0",
    "gpu_executor.py": "V0",
}  # fmt: skip
# words only a V1 engine logs, where no header names a file
_V1_WORDS = re.compile(r"Available KV cache memory|GPU KV cache size|EngineCore")

_VERSION_PATTERNS = (
    re.compile(r"Initializing (?:a (V[01]) |an )?LLM engine \(v?([^)\s]+)\) with config: (.*)$"),
    re.compile(r"vLLM API server version v?(\d[^\s,]*)"),
    # the banner's "version 0.10.2" follows its last block glyph on the same line; bounded, so a line of many
    # glyphs costs linear time (an unbounded .* backtracked from every glyph: the fuzz's one hang)
    re.compile(r"█.{0,200}?\bversion\s+v?(\d+\.\d+[^\s]*)"),
)


_ARGS_WRAP_LINES = 20  # at most this many continuation lines of a wrapped "non-default args:" dict

# Facts a log states about how vLLM ran (settings and paths taken, never a measured figure): the first line
# that says each one wins. (name, pattern, value: a fixed word or the pattern's first group)
FACTS: tuple[tuple[str, re.Pattern[str], str | None], ...] = (
    # the platform vLLM runs on: "Platform plugin ascend is activated" (vllm/platforms/__init__.py, every
    # version with out-of-tree platforms), "Automatically detected platform cuda." (same file), the config
    # line's device_config=npu
    ("platform", re.compile(r"Platform plugin (\w+) is activated"), None),
    ("platform", re.compile(r"Automatically detected platform (\w+)\."), None),
    ("platform", re.compile(r"\bdevice_config=(\w+)"), None),
    ("platform", re.compile(r"# (npu|xpu|hpu|tpu) blocks:"), None),
    # WSL2: "Using 'pin_memory=False' as WSL is detected" (v0.19.0:vllm/platforms/interface.py:522-526)
    ("wsl", re.compile(r"WSL is detected"), "yes"),
    # the model as the runner loads it (gpu_model_runner.py, V0 model_runner.py: "Starting to load model
    # X...")
    ("model_line", re.compile(r"Starting to load model (\S+?)\.{0,3}$"), None),
    # whether the CUDA-graph estimate was taken from the pool (v0.20.0:vllm/v1/worker/gpu_worker.py:440-480
    # the "enabled ... To disable" info and the "disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0)"
    # warning; v0.19.0:gpu_worker.py:446-476: "In v0.19, ... will be enabled by default ... To try it now,
    # set ...=1" when it was not)
    ("cudagraph_estimate", re.compile(r"CUDA graph memory profiling is enabled"), "deducted"),
    ("cudagraph_estimate", re.compile(r"CUDA graph memory profiling is disabled"), "not deducted"),
    (
        "cudagraph_estimate",
        re.compile(r"CUDA graph memory profiling will be enabled by default"),
        "not deducted",
    ),
    # the breakdown as a table under a bare "Memory profiling results:" line: no release read prints it
    # (0.6.4's line goes on with the figures, 0.6.5's worker.py:225 is one "Memory profiling takes" message);
    # a 0.6.5 development build did (vllm PR #10511, comment of 2024-12-14)
    ("profile_table", re.compile(r"^Memory profiling results:\s*$"), "yes"),
    # torch.compile's time, inside V1's profiling window (v0.13.0:vllm/compilation/monitor.py:35
    # "torch.compile takes %.2f s in total"; "took" in 0.22)
    ("compile_seconds", re.compile(r"torch\.compile (?:takes|took) ([\d.]+) s in total"), None),
    # how many graphs the estimate captures (v0.27.1:vllm/v1/worker/gpu_model_runner.py:6668-6681)
    ("cudagraph_graphs", re.compile(r"Profiling CUDA graph memory: (.+)$"), None),
    # the compilation config of the engine-config line: cudagraph mode and capture sizes (v0.11+ repr and
    # the earlier JSON form)
    ("cudagraph_mode", re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)"), None),
    ("cudagraph_capture_sizes", re.compile(r"['\"]cudagraph_capture_sizes['\"]: ?\[([\d, ]*)\]"), None),
)


class LogReader(LineReader):  # feed_text(chunk) / flush(): whole lines to feed()
    """Incremental reader: feed() lines (or chunks of text), result() at any time."""

    def __init__(self) -> None:
        self._s = _State()
        self._command = ""  # a `vllm serve ... \` command continued over several lines
        # a "non-default args: {..." whose dict a terminal copy hard-wrapped onto the next lines (the
        # wrap falls anywhere, inside a word too: the pieces are joined as they are)
        self._args_text = ""
        self._args_lines = 0

    def feed(self, raw: str) -> None:
        s = self._s
        s.lines += 1
        n = s.lines
        msg, rank = strip_line(raw)
        plain = ANSI.sub("", raw)  # the line without its ANSI colours
        msg = self._joined(plain, msg)
        if not msg:
            return
        header = _HEADER.search(plain)
        self._engine_hint(header, raw, msg)
        self._version_and_config(msg, raw)
        if s.flashinfer_sampler_line is None and "Using FlashInfer for top-p & top-k sampling" in msg:
            s.flashinfer_sampler_line = n
        for name, pattern, word in FACTS:
            if name in s.facts:
                continue
            m = pattern.search(msg)
            if m:
                s.facts[name] = (word if word is not None else m.group(1).strip(), n)
        if s.model is None and "model_line" in s.facts:
            s.model = s.facts["model_line"][0]
        if self._profile_table(msg, n, rank):
            return
        self._figures(msg, n, rank)
        for stage, pattern in _STAGE_MARKS:
            if pattern.search(msg):
                self._stage(stage)
        if s.error is None:
            err = _ERROR.search(msg)
            if err and (
                header is not None or "Error" in msg or "out of memory" in msg or "No available memory" in msg
            ):
                s.error = err.group(1).strip()
                s.error_line = n

    def _joined(self, plain: str, msg: str) -> str:
        """The message to read for this line: "" while a hard-wrapped "non-default args" dict or a `vllm serve
        ... \\` command continues over lines, the whole command on its last line."""
        if self._args_text:
            if _HEADER.search(plain) is None and self._args_lines < _ARGS_WRAP_LINES:
                self._args_text += plain.rstrip("\r\n")
                self._args_lines += 1
                if self._non_default_args(self._args_text):
                    self._args_text = ""
                return ""
            self._args_text = ""  # not a wrapped dict after all: the line is read as itself
        if not msg:
            return ""
        if self._command or (msg.endswith("\\") and re.search(r"vllm serve|vllm\.entrypoints", msg)):
            self._command += " " + msg.rstrip("\\").strip()
            if msg.endswith("\\"):
                return ""
            msg, self._command = self._command.strip(), ""
        return msg

    def _engine_hint(self, header: re.Match | None, raw: str, msg: str) -> None:
        s = self._s
        if header is not None:
            s.vllm_lines += 1
            hint = _V1_FILES.get(header.group("file").rsplit("/", 1)[-1])
            if hint and s.engine_hint is None:
                s.engine_hint = hint
        if s.engine_hint is None and _V1_WORDS.search(raw):
            s.engine_hint = "V1"
        if s.engine_hint is None and "non_torch_memory takes" in msg:
            s.engine_hint = "V0"  # the one-line breakdown is the V0 worker's (V1 logs it at DEBUG)

    def _profile_table(self, msg: str, n: int, rank: str) -> bool:
        """The 0.6.5-dev "Memory profiling results:" table: True where this line was one of its rows or its
        title (nothing else to read in it)."""
        s = self._s
        if s.table_pending:
            row = _TABLE_ROW.match(msg)
            if row and row.group("name").strip() in _TABLE:
                name, unit = _TABLE[row.group("name").strip()]
                self._add(name, unit, row.group("value"), n, rank)
                if name == "kv_pool":
                    s.table_pending = False
                self._stage("profiling")
                return True
            if not msg.startswith("duration"):
                s.table_pending = False
        if msg.rstrip() == "Memory profiling results:":
            s.table_pending = True
            self._stage("profiling")
            return True
        return False

    def _figures(self, msg: str, n: int, rank: str) -> None:
        for pattern, names in _FIGURES:
            m = pattern.search(msg)
            if not m:
                continue
            groups = list(m.groups())
            if names and names[-1][1] == "unit":  # "Loading model weights took X GB|GiB"
                self._add(names[0][0], groups[1], groups[0], n, rank)
                continue
            for (name, unit), text in zip(names, groups, strict=False):
                self._add(name, unit, text, n, rank)

    def _version_and_config(self, msg: str, raw: str) -> None:
        s = self._s
        m = _VERSION_PATTERNS[0].search(msg)
        if m:
            s.engine = m.group(1) or s.engine or None
            s.version = s.version or m.group(2)
            s.config.update({k: v for k, v in _config_pairs(m.group(3)).items() if k not in s.config})
            if s.config.get("model"):
                s.model = s.config["model"]
            self._stage("config")
            return
        for pattern in _VERSION_PATTERNS[1:]:
            m = pattern.search(msg)
            if m and s.version is None:
                s.version = m.group(1)
        if "non-default args:" in msg:
            text = msg.split("non-default args:", 1)[1].strip()
            if not self._non_default_args(text) and text.startswith("{") and "}" not in text:
                self._args_text, self._args_lines = text, 0  # wrapped: the next lines continue it
        if "V1 LLM engine" in msg or "EngineCore" in raw:
            s.engine = s.engine or "V1"
        cmd = re.search(r"(?:^|[\s$#>])((?:vllm serve|python3? -m vllm\.entrypoints\S*)\s.*)$", msg)
        if cmd and not _HEADER.search(msg):
            model, args = _serve_args(cmd.group(1))
            if model and s.model is None:
                s.model = model
            for key, value in args.items():
                s.args.setdefault(key, value)

    def _non_default_args(self, text: str) -> bool:
        """Read a "non-default args:" dict; False when the text is not (yet) a whole dict literal."""
        s = self._s
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return False
        if not isinstance(parsed, dict):
            return False
        for key, value in parsed.items():
            s.args.setdefault(str(key), value)
        if s.model is None and isinstance(parsed.get("model"), str):
            s.model = parsed["model"]
        return True

    def _stage(self, stage: str) -> None:
        if STAGES.index(stage) > STAGES.index(self._s.stage):
            self._s.stage = stage

    def _add(self, name: str, unit: str, text: str, line: int, rank: str) -> None:
        value = limits.logged_number(text)
        if value is None or not plausible(abs(value) if name in SIGNED_FIGURES else value, unit):
            shown = f"{text.strip()[:40]} {unit}".rstrip()
            self._s.refused.append(
                f"line {line}: {shown} is a {name.replace('_', '-')} figure out of range (vLLM logs "
                + ("it finite" if name in SIGNED_FIGURES else "sizes and counts of 0 or more, finite")
                + ")"
            )
            return
        self._s.figures.setdefault(name, []).append(Figure(name, value, unit, text, line, rank))

    def result(self) -> VLLMLog:
        s = self._s
        is_vllm = (
            bool(s.vllm_lines and (s.figures or s.config or s.version or s.args))
            or bool(s.figures and (s.config or s.version))
            or bool(s.figures.get("kv_pool") or s.figures.get("num_blocks") or s.figures.get("kv_tokens"))
        )
        is_vllm = is_vllm or bool(s.error and _VLLM_ERROR.search(s.error))
        engine = s.engine or s.engine_hint
        if engine is None and s.version:
            engine = _engine_from_version(s.version, s.figures)
        return VLLMLog(
            is_vllm=is_vllm,
            version=s.version,
            engine=engine,
            model=s.model,
            config=dict(s.config),
            args=dict(s.args),
            figures={k: tuple(v) for k, v in s.figures.items()},
            stage=s.stage,
            error=s.error,
            error_line=s.error_line,
            lines=s.lines,
            notes=tuple(s.notes),
            refused=tuple(s.refused),
            flashinfer_sampler_line=s.flashinfer_sampler_line,
            facts=dict(s.facts),
        )


def _engine_from_version(version: str, figures: Mapping[str, list[Figure]]) -> str | None:
    digits = re.findall(r"\d{1,6}", version)  # a version's parts, not a run of 5,000 digits
    if len(digits) < 2:
        return None
    ver = (int(digits[0]), int(digits[1]))
    if ver >= (0, 11):
        return "V1"
    if "requested" in figures or "non_torch" in figures:  # the V0 worker's breakdown
        return "V0"
    if ver < (0, 8):
        return "V0"
    return None


def parse_log(text: str | Iterable[str]) -> VLLMLog:
    """Parse a whole log (a string, or an iterable of lines)."""
    return read_all(LogReader(), text)
