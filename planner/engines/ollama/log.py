"""Read an Ollama server log (0.3 .. now): the model, the runner's arguments and every memory figure it logs.

Pure text parsing, stdlib only. Ollama logs through Go's slog in logfmt ("time=... level=INFO
source=f.go:12 msg=\"kv cache\" device=CUDA0 size=\"936.0 MiB\""), often behind journald's "Jun 05 12:36:11
host ollama[123]: " or Windows paths; the runner it starts adds its own lines (llama.cpp's, for the llama
engine), which planner.engines.llamacpp reads. Sizes are format.HumanBytes2: "%.1f GiB" / "%.1f MiB" /
"%.1f KiB" / "N B" (format/bytes.go), so a figure is known to 0.05 of its unit.

What is read (file:line at the tag named):
- the scheduler's estimate before loading: `msg=offload` / `msg="offload to cuda"` with layers.model,
  layers.offload, memory.required.{full,partial,kv}, memory.weights.{total,repeating,nonrepeating},
  memory.graph.{full,partial}, projector.{weights,graph} (v0.9.0 llm/memory.go:358-415, logged by
  llm/server.go);
- the runner's command line, `msg="starting llama server"` / `msg="starting runner"` cmd="... --ctx-size N
  --batch-size B --n-gpu-layers L --parallel P [--flash-attn] [--kv-cache-type T]" (v0.9.0
  llm/server.go:172-247: ctx-size is num_ctx x num_parallel, server/sched.go:212);
- the new engine's load request, `msg=load request="{Operation:commit ... Parallel:1 BatchSize:512
  FlashAttention:true KvSize:26624 KvCacheType:q4_0 ... GPULayers:33[...]}"` (v0.12.6 runner/ollamarunner);
- what was allocated, per device: `msg="model weights" device=CUDA0 size=...`, `msg="kv cache" ...`,
  `msg="compute graph" ...`, `msg="total memory" size=...` (ml/device.go BackendMemory.Log; v0.11.x
  ml/backend/ggml/backend.go), and the 0.9 - 0.11 wording `msg="model weights" buffer=CUDA0 size=...`,
  `msg="compute graph" backend=CUDA0 buffer_type=CUDA0 size=...` (v0.11.10 ml/backend/ggml/ggml.go:381,814);
- `offloaded N/M layers to GPU` (ggml.go:498, and llama.cpp's own line);
- `msg="vram-based default context" total_vram=... default_num_ctx=N` (v0.20.0 server/routes.go:1852);
- `msg="" architecture=ARCH file_type=Q4_K_M name=... num_tensors=...` (the new engine's model summary).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.engines.base import ANSI, Figure, LineReader, plausible, read_all

STAGES = ("start", "estimate", "runner", "loaded", "ready")
STAGE_WORDS = {
    "start": "before Ollama estimated where the model goes",
    "estimate": "after the scheduler's estimate, before the runner started",
    "runner": "after the runner started, before it logged what it allocated",
    "loaded": "after the runner allocated the model, before it answered",
    "ready": "the runner was ready",
}

# A key starts where a word starts: without the lookbehind, a long run of word characters with no "=" (a
# figure of 5,000 digits) was tried from each of its positions: quadratic in the line (250 KiB: minutes).
_LOGFMT = re.compile(r'(?<![\w.])([\w.]+)=("(?:[^"\\]|\\.)*"|\S*)')
_SIZE = re.compile(r"^(-?\d+(?:\.\d+)?) ?(GiB|MiB|KiB|B|GB|MB|KB)$")
_UNIT_BYTES = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "B": 1, "GB": 10**9, "MB": 10**6, "KB": 10**3}
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# a field from its first character (the lookbehind): unanchored, \w+ backtracked over a whole run of
# letters at every position (quadratic: 400 s for a 240 KB line of letters)
_REQUEST_FIELD = re.compile(r"(?<!\w)(\w+):(\[[^\]]*\]|[^\s\[\]{}]*)")
_RUNNER_FLAGS = ("ctx-size", "batch-size", "n-gpu-layers", "parallel", "kv-cache-type", "threads", "model")

# the estimate line's keys -> figure names
_ESTIMATE_KEYS = {
    "memory.required.full": "estimate_full",
    "memory.required.partial": "estimate_partial",
    "memory.required.kv": "estimate_kv",
    "memory.weights.total": "estimate_weights",
    "memory.weights.repeating": "estimate_weights_repeating",
    "memory.weights.nonrepeating": "estimate_weights_nonrepeating",
    "memory.graph.full": "estimate_graph_full",
    "memory.graph.partial": "estimate_graph_partial",
    "projector.weights": "estimate_projector",
    "projector.graph": "estimate_projector_graph",
}
# allocation summaries -> figure names (device in `rank`)
_ALLOCATIONS = {"model weights": "weights", "kv cache": "kv_cache", "compute graph": "compute_graph"}


def unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value


def logfmt(line: str) -> dict[str, str]:
    """key=value pairs of one slog line (the first occurrence of a key wins)."""
    pairs: dict[str, str] = {}
    for key, value in _LOGFMT.findall(line):
        pairs.setdefault(key, unquote(value))
    return pairs


def size_bytes(text: str) -> int | None:
    m = _SIZE.match(text.strip())
    if not m:
        return None
    return round(float(m.group(1)) * _UNIT_BYTES[m.group(2)])


@dataclass(frozen=True, slots=True)
class OllamaLog:
    """What an Ollama server log says about its last model load. `figures` maps a stable name to every
    occurrence (first first; sizes in "MiB" or "GiB" as printed, the device in `rank`)."""

    is_ollama: bool
    figures: Mapping[str, tuple[Figure, ...]]
    runner: Mapping[str, str]  # the runner's flags (ctx-size, parallel, kv-cache-type, ...) and load request
    runner_line: int | None
    architecture: str | None
    file_type: str | None
    model_name: str | None
    model_path: str | None
    engine: str | None  # "ollama" (--ollama-engine / the load request) | "llama" (llama.cpp runner) | None
    stage: str
    error: str | None
    error_line: int | None
    lines: int
    # the llama runner's own lines (llama.cpp's: its buffers, context), read by llama.cpp's reader; None when
    # the log has none
    llama: Any = None

    def figure(self, name: str, device: str | None = None) -> Figure | None:
        """The last figure of `name` (for `device`): a log can hold several loads, the last one is current."""
        found = [f for f in self.figures.get(name, ()) if device is None or f.rank == device]
        return found[-1] if found else None

    def devices(self, name: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.rank for f in self.figures.get(name, ())))

    def setting(self, *names: str) -> str | None:
        for name in names:
            value = self.runner.get(name)
            if value not in (None, ""):
                return value
        return None

    @property
    def finished(self) -> bool:
        return STAGES.index(self.stage) >= STAGES.index("loaded")


@dataclass
class _State:
    figures: dict[str, list[Figure]] = field(default_factory=dict)
    runner: dict[str, str] = field(default_factory=dict)
    runner_line: int | None = None
    architecture: str | None = None
    file_type: str | None = None
    model_name: str | None = None
    model_path: str | None = None
    engine: str | None = None
    stage: str = "start"
    error: str | None = None
    error_line: int | None = None
    lines: int = 0
    ollama_lines: int = 0


class LogReader(LineReader):
    """Incremental reader: feed() lines (or chunks of text), result() at any time."""

    def __init__(self) -> None:
        from planner.engines.llamacpp.log import LogReader as LlamaCppReader  # noqa: PLC0415

        self._s = _State()
        self._llama = LlamaCppReader()

    def feed(self, raw: str) -> None:
        s = self._s
        s.lines += 1
        n = s.lines
        self._llama.feed(raw)  # every line, so that its line numbers are the log's
        line = ANSI.sub("", raw).rstrip("\r\n")
        at = line.find("time=")
        if at < 0 or " msg=" not in line:
            offloaded = _OFFLOADED.search(line)  # llama.cpp's own "offloaded 33/33 layers to GPU"
            if offloaded:
                self._offloaded(offloaded, n)
            return
        pairs = logfmt(line[at:])
        msg = pairs.get("msg", "")
        s.ollama_lines += 1
        self._estimate(pairs, n)
        self._runner(msg, pairs, n)
        self._allocations(msg, pairs, n)
        offloaded = _OFFLOADED.search(msg)
        if offloaded:
            self._offloaded(offloaded, n)
        if msg == "" and "architecture" in pairs:
            s.architecture = pairs["architecture"]
            s.file_type = pairs.get("file_type") or s.file_type
            s.model_name = pairs.get("name") or s.model_name
        if msg == "vram-based default context" and pairs.get("default_num_ctx", "").isdigit():
            self._add(
                "default_num_ctx", float(pairs["default_num_ctx"]), "tokens", pairs["default_num_ctx"], n, ""
            )
        if msg.startswith("llama runner started") or msg == "llama runner started":
            self._stage("ready")
        if s.error is None and pairs.get("level") == "ERROR":
            s.error, s.error_line = (pairs.get("error") or msg)[:300], n

    def _estimate(self, pairs: Mapping[str, str], n: int) -> None:
        msg = pairs.get("msg", "")
        if msg not in ("offload", "offload to cuda", "offload to rocm", "offload to cpu", "offload to metal"):
            return
        for key, name in _ESTIMATE_KEYS.items():
            if key in pairs:
                self._size(name, pairs[key], n, "")
        for key, name in (("layers.model", "estimate_layers_model"), ("layers.offload", "estimate_layers")):
            if pairs.get(key, "").isdigit():
                self._add(name, float(pairs[key]), "layers", pairs[key], n, "")
        self._stage("estimate")

    def _runner(self, msg: str, pairs: Mapping[str, str], n: int) -> None:
        s = self._s
        if msg in ("starting llama server", "starting runner") and "cmd" in pairs:
            cmd = pairs["cmd"]
            s.engine = "ollama" if "--ollama-engine" in cmd else ("llama" if "--model" in cmd else s.engine)
            words = cmd.split()
            flags: dict[str, str] = {}
            for i, word in enumerate(words):
                if word.startswith("--"):
                    key = word[2:]
                    following = words[i + 1] if i + 1 < len(words) else ""
                    flags[key] = following if following and not following.startswith("--") else "true"
            for key in (*_RUNNER_FLAGS, "flash-attn", "no-mmap"):
                if key in flags:
                    s.runner[key] = flags[key]
            s.model_path = flags.get("model") or s.model_path
            s.runner_line = n
            self._stage("runner")
        elif msg == "load" and "request" in pairs:
            s.engine = "ollama"
            fields = dict(_REQUEST_FIELD.findall(pairs["request"].strip("{}")))
            for key, name in (
                ("KvSize", "ctx-size"),
                ("Parallel", "parallel"),
                ("BatchSize", "batch-size"),
                ("KvCacheType", "kv-cache-type"),
                ("FlashAttention", "flash-attn"),
            ):
                if key in fields:
                    s.runner[name] = fields[key]
            gpu_layers = re.match(r"(\d+)", fields.get("GPULayers", ""))
            if gpu_layers:
                s.runner["n-gpu-layers"] = gpu_layers.group(1)
            s.runner_line = n
            self._stage("runner")

    def _allocations(self, msg: str, pairs: Mapping[str, str], n: int) -> None:
        name = _ALLOCATIONS.get(msg)
        if name is not None and "size" in pairs:
            device = pairs.get("device") or pairs.get("buffer") or pairs.get("backend") or ""
            self._size(name, pairs["size"], n, device)
            self._stage("loaded")
        elif msg == "total memory" and "size" in pairs:
            self._size("total", pairs["size"], n, "")
            self._stage("loaded")

    def _offloaded(self, m: re.Match[str], n: int) -> None:
        self._add("offloaded_layers", float(m.group(1)), "layers", m.group(1), n, "")
        self._add("model_layers", float(m.group(2)), "layers", m.group(2), n, "")

    def _size(self, name: str, text: str, n: int, device: str) -> None:
        m = _SIZE.match(text.strip())
        if m:
            unit = {"KiB": "MiB", "B": "MiB"}.get(m.group(2), m.group(2))
            value = float(m.group(1)) * (_UNIT_BYTES[m.group(2)] / _UNIT_BYTES[unit])
            self._add(name, value, unit, text.strip(), n, device)

    def _add(self, name: str, value: float, unit: str, text: str, line: int, rank: str) -> None:
        if not plausible(value, unit):
            return
        self._s.figures.setdefault(name, []).append(Figure(name, value, unit, text, line, rank))

    def _stage(self, stage: str) -> None:
        if STAGES.index(stage) > STAGES.index(self._s.stage):
            self._s.stage = stage

    def result(self) -> OllamaLog:
        s = self._s
        is_ollama = s.ollama_lines > 0 and bool(s.figures or s.runner)
        return OllamaLog(
            is_ollama=is_ollama,
            figures={k: tuple(v) for k, v in s.figures.items()},
            runner=dict(s.runner),
            runner_line=s.runner_line,
            architecture=s.architecture,
            file_type=s.file_type,
            model_name=s.model_name,
            model_path=s.model_path,
            engine=s.engine,
            stage=s.stage,
            error=s.error,
            error_line=s.error_line,
            lines=s.lines,
            llama=llama if (llama := self._llama.result()).is_llamacpp else None,
        )


def parse_log(text: str | Iterable[str]) -> OllamaLog:
    return read_all(LogReader(), text)


def looks_like_ollama(text: str) -> bool:
    return bool(
        re.search(
            r'source=\w+\.go:\d+ msg=|msg="(?:starting llama server|starting runner|offload to|'
            r'model weights|kv cache|total memory)"',
            text,
        )
    )
