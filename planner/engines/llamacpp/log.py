"""Read a llama.cpp start-up log (llama-server, llama-cli, and programs built on libllama): the build, the
model's architecture and tensor types as the loader prints them, and every memory figure llama.cpp logs.

Pure text parsing, stdlib only. The wordings come from llama.cpp's sources across builds:
- model: `llama_model_loader: - kv N: KEY TYPE = VALUE`, `llama_model_loader: - type q4_K: N tensors`,
  `print_info: n_layer = 32` (`llm_load_print_meta:` before ~b4400), `file type = Q4_K - Medium`,
  `file size = 4.58 GiB (4.89 BPW)` (`model size =` before);
- weights: `load_tensors: offloaded 33/33 layers to GPU`, `load_tensors: CUDA0 model buffer size = X MiB`
  (`llm_load_tensors: CUDA0 buffer size = X MiB` before ~b4400), `CPU_Mapped` / `CPU_REPACK` / `CPU` buffers;
- context: `llama_context: n_ctx = 8192` (`llama_new_context_with_model:` before ~b4800), n_ctx_seq /
  n_ctx_per_seq, n_seq_max, n_batch, n_ubatch, flash_attn, kv_unified;
- KV: `llama_kv_cache: CUDA0 KV buffer size = X MiB` (`llama_kv_cache_unified:` b5500 - b6600,
  `llama_kv_cache_init:` before), `llama_kv_cache: size = X MiB (N cells, L layers, a/b seqs), K (f16): X MiB,
  V (f16): X MiB` (`..., 1 seqs)` without streams in b5500 - b6400), `KV self size = X MiB, K (f16): X MiB,
  V (f16): X MiB` (before ~b5500), `llama_kv_cache_iswa: creating SWA KV cache, size = N cells`;
- compute: `llama_context: CUDA0 compute buffer size = X MiB` (`sched_reserve:` in recent builds,
  `llama_new_context_with_model:` before), `CUDA_Host compute buffer size`, `CPU output buffer size`;
- the memory breakdown table (`memory breakdown [MiB] | total free self model context compute unaccounted`)
  and the `--fit` lines (`llama_params_fit:` / `common_params_fit_impl: projected to use X MiB ...`).
Every figure keeps its line number; a device-specific figure keeps its device in `rank`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from planner import limits
from planner.engines.base import Figure, FigureLookups, LineReader, plausible, read_all

STAGES = ("start", "model", "weights", "context", "ready")
STAGE_WORDS = {
    "start": "before it printed the model's metadata",
    "model": "after reading the model's metadata, before the weights were loaded",
    "weights": "after loading the weights, before the KV cache was allocated",
    "context": "after allocating the KV cache, before the compute buffers were reserved",
    "ready": "after the context was ready",
}

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\^\[\[[0-9;]*m")
# What people's tools put before llama.cpp's own text: docker compose ("llama-1  | "), timestamps
# ("2026-05-14 22:14:14.195 | ", "0.00.612.795 I ", "[41000] "), LLamaSharp ("[llama Debug]: ").
_PREFIX = re.compile(
    r"^(?:[\w.-]+\s+\|\s+)?(?:\[\d+\]\s+)?(?:\d{4}-\d\d-\d\d[ T][\d:.]+\s*\|?\s*)?"
    r"(?:\d+\.\d\d\.\d{3}\.\d{3}\s+[IWEDT]\s+)?(?:\[llama \w+\]:\s*)?"
)
# nan and inf are matched so that a damaged size is refused by name, not skipped as a line of another kind
_NUM = r"(-?(?:[\d.]+(?:e[+-]?\d+)?|nan|inf))"
# a function name from its first letter (the lookbehind): searched from inside a long run of letters, an
# unanchored [a-z_]+ backtracked over the whole run at every position (quadratic: the long fuzz run's hang)
_FUNC = r"(?<![a-z_])(?P<func>[a-z_]+):\s+"

_KV_META = re.compile(
    r"llama_model_loader: - kv\s+\d+:\s+(?P<key>[\w.]+)\s+(?P<type>[\w\[\],]+)\s+=\s+(?P<v>.*)$"
)
_TYPE_COUNT = re.compile(r"llama_model_loader: - type\s+(?P<type>\w+):\s+(?P<n>\d+) tensors")
_LOADED = re.compile(r"llama_model_loader: loaded meta data with \d+ key-value pairs and (?P<n>\d+) tensors")
_INFO = re.compile(
    r"(?:print_info|llm_load_print_meta|llama_model_load_internal):\s+(?P<key>[\w .]+?)\s+=\s+(?P<v>.*)$"
)
_BUILD = re.compile(
    r"(?:^|\s)(?:build|version)(?:_info)?(?:\s*[:=])?\s+(?:b?(?P<n>\d+)[ -]\(?(?P<commit>[0-9a-f]{7,})?\)?)"
)
_DEVICE = re.compile(r"Device (?P<i>\d+): (?P<name>[^,]+), compute capability (?P<cc>[\d.]+)")
# the devices the model is spread over, in llama.cpp's order, with the free memory the default split uses
# ("llama_model_load_from_file_impl: using device CUDA0 (NVIDIA ...) - 22926 MiB free"; 2026 builds:
# "llama_prepare_model_devices: using device RPC0 (192.168.1.167:50052) (unknown id) - 5657 MiB free")
_USING_DEVICE = re.compile(r"using device (?P<dev>[A-Za-z]+\d*) \(.*\) - (?P<free>\d+) MiB free")
# flash attention "auto" resolved (2025-2026 builds: resolve_fused_ops / llama_context)
_FA_RESOLVED = re.compile(
    r"Flash Attention (?P<how>enabled|not supported, set to disabled|was auto, set to (?:enabled|disabled))"
)
# host tensors beyond the input layer: --n-cpu-moe / --override-tensor (a debug line)
_HOST_TENSORS = re.compile(
    r"tensor '[^']+' \(\w+\) \(and (?P<n>\d+) others\) cannot be used with preferred buffer type"
)
# a device buffer's name without an RPC server's address: "RPC0[192.168.1.167:50052]" -> "RPC0"
_RANK_ADDRESS = re.compile(r"\[[^\]]*\]$")
_OFFLOADED = re.compile(r"offloaded (?P<n>\d+)/(?P<m>\d+) layers to GPU")
_MODEL_BUF = re.compile(
    rf"(?:load_tensors|llm_load_tensors):\s+(?P<dev>[\w\[\]:./-]+) (?:model )?buffer size =\s*{_NUM} MiB"
)
# llama.cpp prints every buffer as "%.2f MiB" (ggml_backend_buffer_get_size / 1024 / 1024); a buffer line in
# another unit was edited or comes from another program, and reading past it would lose a bucket silently
_BUFFER_OTHER_UNIT = re.compile(rf"buffer size =\s*{_NUM} ?(?P<unit>(?!MiB\b)[KMGTP]i?B|bytes?)\b")
_KV_BUF = re.compile(rf"llama_kv_cache\w*:\s+(?P<dev>[\w\[\]:./-]+) KV buffer size =\s*{_NUM} MiB")
_KV_SIZE = re.compile(
    rf"llama_kv_cache\w*: size =\s*{_NUM} MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,\s*"
    rf"(?P<seqs>\d+)(?:/(?P<streams>\d+))? seqs\), K \((?P<kt>\w+)\):\s*{_NUM} MiB, "
    rf"V \((?P<vt>\w+)\):\s*{_NUM} MiB"
)
_KV_SELF = re.compile(
    rf"KV self size\s*=\s*{_NUM} MiB, K \((?P<kt>\w+)\):\s*{_NUM} MiB, V \((?P<vt>\w+)\):\s*{_NUM} MiB"
)
# the GGML (pre-GGUF) era, before ~b1000: one total, "MB" meaning MiB
_KV_SELF_OLD = re.compile(rf"kv self size\s*=\s*{_NUM} MB$")
_KV_INIT = re.compile(
    r"llama_kv_cache_init: kv_size = (?P<cells>\d+), offload = \d, type_k = '(?P<kt>\w+)', "
    r"type_v = '(?P<vt>\w+)', n_layer = (?P<layers>\d+)"
)
_GENERATE = re.compile(r"^generate: n_ctx = (?P<n>\d+), n_batch = (?P<b>\d+)")
_ISWA = re.compile(
    r"llama_kv_cache_iswa: creating\s+(?P<which>non-SWA|SWA) KV cache, size = (?P<cells>\d+) cells"
)
_COMPUTE = re.compile(rf"{_FUNC}(?P<dev>[\w\[\]:./-]+) compute buffer size =\s*{_NUM} MiB")
_OUTPUT = re.compile(rf"{_FUNC}(?P<dev>[\w\[\]:./-]+)\s+output buffer size =\s*{_NUM} MiB")
_CTX_PARAM = re.compile(
    r"(?:llama_context|llama_new_context_with_model|llama_init_from_model):\s+(?P<key>n_ctx|n_ctx_seq|"
    r"n_ctx_per_seq|n_seq_max|n_batch|n_ubatch|flash_attn|kv_unified|causal_attn|n_outputs_max)\s+=\s+"
    r"(?P<v>\S+)"
)
_BREAKDOWN = re.compile(
    r"\|\s+-\s+(?P<dev>[^|(]+?)(?:\s+\([^)]*\))?\s+\|\s+(?:(?P<total>\d+)\s+=\s+(?P<free>\d+)\s+\+\s+)?"
    r"\(?(?P<self>\d+)\s+=\s+(?P<model>\d+)\s+\+\s+(?P<context>\d+)\s+\+\s+(?P<compute>\d+)\)?"
    r"(?:\s+\+\s+(?P<unaccounted>-?\d+))?"
)
_FIT = re.compile(r"(?:llama_params_fit\w*|common_params_fit\w*|common_fit_params):\s+(?P<msg>.*)$")
_READY = re.compile(
    r"main: model loaded|server is listening on|main: server is listening|llama_perf_context_print|"
    r"== Running in interactive mode|sampler seed:|generate: n_ctx|all slots are idle"
)
_ERROR = re.compile(
    r"(?P<msg>(?:failed to allocate|cudaMalloc failed|out of memory|failed to load model|"
    r"failed to initialize the context|error loading model|unable to load model|"
    r"GGML_ASSERT|terminate called)\b.*)$",
    re.IGNORECASE,
)
# lines only llama.cpp writes: enough to say that a log is llama.cpp's
# llama-server up and serving (llama_server: since 2026, main: before), whatever the log level
_SERVER_UP = re.compile(r"(?:llama_server|main): (?:model loaded|server is listening|listening on)")
_VERBOSITY = re.compile(r"common_params_print_info: verbosity = (?P<n>\d+)")
_MARKERS = re.compile(
    r"llama_model_loader:|llm_load_print_meta:|print_info: (?:arch|n_layer|file type)|load_tensors:|"
    r"llm_load_tensors:|llama_kv_cache|llama_context:|llama_new_context_with_model:|ggml_cuda_init:|"
    r"llama_model_load_internal:|llama\.cpp: loading model from|llama_server: |common_params_print_info:"
)


@dataclass(frozen=True, slots=True)
class KVCacheLine:
    """One `size = ...` line: one KV cache (the SWA and non-SWA caches of an iSWA model are two)."""

    total_mib: float
    cells: int | None  # None in the old `KV self size` wording
    layers: int | None
    seqs: int | None
    streams: int | None  # None before the a/b form (one stream)
    k_type: str | None  # None: the line does not name the types
    k_mib: float | None  # None: the line gives only the total
    v_type: str | None
    v_mib: float | None
    line: int
    swa: bool | None  # True/False after an iSWA "creating ... KV cache" line, else None


@dataclass(frozen=True, slots=True)
class LlamaCppLog(FigureLookups):
    """What a llama.cpp start-up log says. `figures` maps a stable name to every occurrence, first first."""

    is_llamacpp: bool
    build: int | None
    commit: str | None
    metadata: Mapping[str, str]  # the GGUF key/values as the loader printed them
    info: Mapping[str, str]  # print_info / llm_load_print_meta: n_layer, n_head_kv, file type, ...
    tensor_types: Mapping[str, int]  # ggml type -> tensors of it
    tensor_count: int | None
    context: Mapping[str, str]  # n_ctx, n_seq_max, n_ubatch, flash_attn, kv_unified, ...
    figures: Mapping[str, tuple[Figure, ...]]
    kv_caches: tuple[KVCacheLine, ...]
    breakdown: tuple[Mapping[str, int | str], ...]  # the memory breakdown rows (MiB), last table only
    fit: tuple[str, ...]  # the --fit lines, as printed
    devices: tuple[str, ...]  # "NVIDIA GeForce RTX 4090 (cc 8.9)"
    model_devices: tuple[tuple[str, int], ...]  # ("RPC0", 5657): the devices used, in order, MiB free
    stage: str
    error: str | None
    error_line: int | None
    lines: int
    bad_size: str | None = None  # the first size no llama.cpp prints ("-5.00 MiB"), and its line
    bad_size_line: int | None = None
    server_up: bool = False  # llama-server said "model loaded" or "listening on"

    def by_device(self, name: str) -> dict[str, Figure]:
        """The last figure of `name` per device (a log can hold a --fit dry run before the real load)."""
        out: dict[str, Figure] = {}
        for fig in self.figures.get(name, ()):
            out[fig.rank] = fig
        return out

    @property
    def finished(self) -> bool:
        return STAGES.index(self.stage) >= STAGES.index("context")

    def arch(self, key: str) -> str | None:
        return self.info.get(key)


@dataclass
class _State:
    build: int | None = None
    commit: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)
    tensor_types: dict[str, int] = field(default_factory=dict)
    tensor_count: int | None = None
    context: dict[str, str] = field(default_factory=dict)
    figures: dict[str, list[Figure]] = field(default_factory=dict)
    kv_caches: list[KVCacheLine] = field(default_factory=list)
    breakdown: list[dict[str, int | str]] = field(default_factory=list)
    breakdown_open: bool = False
    fit: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    model_devices: dict[str, int] = field(default_factory=dict)
    swa_next: bool | None = None
    stage: str = "start"
    markers: int = 0
    error: str | None = None
    error_line: int | None = None
    lines: int = 0
    bad_size: str | None = None
    bad_size_line: int | None = None
    server_up: bool = False


def strip_line(raw: str) -> str:
    """One raw line without ANSI colours and the prefixes tools put before llama.cpp's text."""
    line = _ANSI.sub("", raw).rstrip("\r\n")
    return _PREFIX.sub("", line, count=1).strip()


def _stage(s: _State, stage: str) -> None:
    if STAGES.index(stage) > STAGES.index(s.stage):
        s.stage = stage


class BadSize(ValueError):
    """A size no llama.cpp prints (negative, inf, nan, 400 digits, a unit other than MiB): the line is not
    read, and the log is refused naming it (explain.stage_problem) rather than explained without it. Its
    text is the size and why it cannot be llama.cpp's."""

    @classmethod
    def out_of_range(cls, size: str) -> BadSize:
        return cls(f"{size} is a size out of range (llama.cpp prints sizes of 0 or more, finite)")


def _mib(text: str) -> float:
    """A size the log printed in MiB; BadSize for one llama.cpp cannot print."""
    value = limits.logged_number(text)
    if value is None or not plausible(value, "MiB"):
        raise BadSize.out_of_range(f"{text.strip()[:40]} MiB")
    return value


def _count(text: str) -> int:
    """A count the log printed (cells, layers, tensors, MiB free); ValueError past 2^48."""
    if len(text) > 15:
        raise ValueError(f"{text[:40]!r} is no count a log prints")
    return int(text)


def _add(s: _State, name: str, value: str, unit: str, line: int, rank: str = "") -> None:
    number = limits.logged_number(value)
    if number is None or not plausible(number, unit):
        raise BadSize.out_of_range(f"{value.strip()[:40]} {unit}")
    rank = _RANK_ADDRESS.sub("", rank.strip())
    s.figures.setdefault(name, []).append(Figure(name, number, unit, value, line, rank))


def _read_model(s: _State, text: str, n: int) -> bool:
    m = _KV_META.search(text)
    if m:
        s.metadata[m.group("key")] = m.group("v").strip()
        _stage(s, "model")
        return True
    m = _TYPE_COUNT.search(text)
    if m:
        s.tensor_types[m.group("type").lower()] = _count(m.group("n"))
        return True
    m = _LOADED.search(text)
    if m:
        s.tensor_count = _count(m.group("n"))
        _stage(s, "model")
        return True
    m = _INFO.search(text)
    if m:
        s.info[m.group("key").strip()] = m.group("v").strip()
        _stage(s, "model")
        return True
    return False


def _read_buffers(s: _State, text: str, n: int) -> bool:
    m = _BUFFER_OTHER_UNIT.search(text)
    if m:
        size = f"{m.group(1)} {m.group('unit')}"
        raise BadSize(f"{size} is in a unit llama.cpp does not print there (its buffer sizes are always in "
                      "MiB)")
    m = _OFFLOADED.search(text)
    if m:
        _add(s, "offloaded", m.group("n"), "layers", n)
        _add(s, "offloadable", m.group("m"), "layers", n)
        return True
    m = _MODEL_BUF.search(text)
    if m:
        _add(s, "model_buffer", m.group(2), "MiB", n, m.group("dev"))
        _stage(s, "weights")
        return True
    m = _KV_BUF.search(text)
    if m:
        _add(s, "kv_buffer", m.group(2), "MiB", n, m.group("dev"))
        _stage(s, "context")
        return True
    if _read_kv_cache(s, text, n):
        return True
    m = _COMPUTE.search(text)
    if m:
        _add(s, "compute_buffer", m.group(3), "MiB", n, m.group("dev"))
        _stage(s, "ready")
        return True
    m = _OUTPUT.search(text)
    if m:
        _add(s, "output_buffer", m.group(3), "MiB", n, m.group("dev"))
        return True
    return False


def _read_kv_cache(s: _State, text: str, n: int) -> bool:
    """The KV cache's own lines, of every llama.cpp era: its size and types, and which cache comes next."""
    m = _ISWA.search(text)
    if m:
        s.swa_next = m.group("which") == "SWA"
        return True
    m = _KV_SIZE.search(text)
    if m:
        total, cells, layers, seqs = m.group(1), m.group("cells"), m.group("layers"), m.group("seqs")
        streams = m.group("streams")
        s.kv_caches.append(
            KVCacheLine(_mib(total), _count(cells), _count(layers), _count(seqs),
                        _count(streams) if streams else None, m.group("kt"), _mib(m.group(7)), m.group("vt"),
                        _mib(m.group(9)), n, s.swa_next)
        )  # fmt: skip
        _stage(s, "context")
        return True
    m = _KV_SELF.search(text)
    if m:
        s.kv_caches.append(
            KVCacheLine(_mib(m.group(1)), None, None, None, None, m.group("kt"), _mib(m.group(3)),
                        m.group("vt"), _mib(m.group(5)), n, None)
        )  # fmt: skip
        _stage(s, "context")
        return True
    m = _KV_SELF_OLD.search(text)
    if m:
        s.kv_caches.append(
            KVCacheLine(_mib(m.group(1)), None, None, None, None, None, None, None, None, n, None)
        )
        _stage(s, "context")
        return True
    m = _KV_INIT.search(text)
    if m:
        s.context.update(kv_size=m.group("cells"), type_k=m.group("kt"), type_v=m.group("vt"))
        return True
    return False


def _read_breakdown(s: _State, text: str) -> bool:
    if "memory breakdown [MiB]" in text:
        s.breakdown = []  # a later table (at exit) replaces the projected one
        s.breakdown_open = True
        return True
    if not s.breakdown_open:
        return False
    m = _BREAKDOWN.search(text)
    if m is None:
        s.breakdown_open = False
        return False
    row: dict[str, int | str] = {"device": m.group("dev").strip()}
    for key in ("total", "free", "self", "model", "context", "compute", "unaccounted"):
        if m.group(key) is not None:
            row[key] = _count(m.group(key))
    s.breakdown.append(row)
    return True


class LogReader(LineReader):
    """Incremental: feed() lines as they arrive (or feed_text() chunks of any size), result() at any moment
    (the Live screen follows a child)."""

    def __init__(self) -> None:
        self._s = _State()

    def feed(self, raw: str) -> None:
        s = self._s
        s.lines += 1
        n = s.lines
        text = strip_line(raw)
        if not text:
            return
        if _MARKERS.search(text):
            s.markers += 1
        try:
            self._read(s, raw, text, n)
        except BadSize as exc:
            if s.bad_size is None:
                s.bad_size, s.bad_size_line = str(exc), n
        except ValueError:  # a count no llama.cpp prints (_count): the line is not read
            return

    def _read(self, s: _State, raw: str, text: str, n: int) -> None:
        m = _VERBOSITY.search(text)
        if m:  # before _read_model: "common_params_print_info:" is no print_info line of the model
            s.context["verbosity"] = m.group("n")
            return
        if _read_breakdown(s, text) or _read_model(s, text, n) or _read_buffers(s, text, n):
            return
        m = _CTX_PARAM.search(text)
        if m:
            s.context[m.group("key")] = m.group("v")
            return
        m = _GENERATE.search(text)
        if m:
            s.context.setdefault("n_ctx", m.group("n"))
            _stage(s, "ready")
            return
        m = _FIT.search(text)
        if m:
            s.fit.append(m.group("msg").strip())
            return
        m = _DEVICE.search(text)
        if m:
            s.devices.append(f"{m.group('name').strip()} (cc {m.group('cc')})")
            return
        m = _USING_DEVICE.search(text)
        if m:  # a --fit dry run prints them too: the later line wins, the order is the first's
            s.model_devices[m.group("dev")] = _count(m.group("free"))
            return
        m = _FA_RESOLVED.search(text)
        if m:
            s.context["flash_attn_resolved"] = "0" if "disabled" in m.group("how") else "1"
            return
        m = _HOST_TENSORS.search(text)
        if m:
            s.context["host_tensors"] = str(_count(m.group("n")) + 1)
            return
        m = _BUILD.search(text)
        if m and s.build is None and ("llama" in raw or "build" in text):
            s.build = _count(m.group("n"))
            s.commit = m.group("commit")
            return
        if _SERVER_UP.search(text):
            s.server_up = True
        if _READY.search(text) and s.figures.get("kv_buffer"):
            _stage(s, "ready")
            return
        m = _ERROR.search(text)
        if m and s.error is None:
            s.error, s.error_line = m.group("msg").strip()[:300], n

    def result(self) -> LlamaCppLog:
        s = self._s
        return LlamaCppLog(
            is_llamacpp=s.markers >= 2,
            build=s.build,
            commit=s.commit,
            metadata=dict(s.metadata),
            info=dict(s.info),
            tensor_types=dict(s.tensor_types),
            tensor_count=s.tensor_count,
            context=dict(s.context),
            figures={k: tuple(v) for k, v in s.figures.items()},
            kv_caches=tuple(s.kv_caches),
            breakdown=tuple(dict(r) for r in s.breakdown),
            fit=tuple(s.fit),
            devices=tuple(s.devices),
            model_devices=tuple(s.model_devices.items()),
            stage=s.stage,
            error=s.error,
            error_line=s.error_line,
            lines=s.lines,
            bad_size=s.bad_size,
            bad_size_line=s.bad_size_line,
            server_up=s.server_up,
        )


def parse_log(text: str | Iterable[str]) -> LlamaCppLog:
    return read_all(LogReader(), text)
