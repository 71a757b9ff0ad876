"""Read an SGLang server log (0.3 .. 0.5): the model, the server arguments and every memory figure SGLang
logs.

Pure text parsing, stdlib only. Accepts what people paste: the "[2025-03-08 12:29:21 TP0]" header with any of
its rank tags ("TP0", "DP0 TP0 EP0", "PP1 TP0"), the bare "[20:52:05]" header of recent versions, docker
compose timestamps in front of it, ANSI colours, the `python -m sglang.launch_server ...` / `sglang serve ...`
command line, tqdm bars glued to a line, and lines elided with "...". Every figure keeps its line number.

SGLang prints sizes as "GB" but divides by 1 << 30 (`get_available_gpu_memory`, every release), so every
"GB" figure here is GiB.

The wordings, from SGLang's release wheels (file:line in the release named):
- model_runner.py: "Init torch distributed ends. [elapsed=S s, ]mem usage=X GB" (0.4.3.post4 :314);
  "Load weight begin. avail mem=X GB" (the free memory every later figure is measured against);
  "Load weight end. [elapsed=S s, ]type=CLS, [dtype=D, |quant=Q, ]avail mem=A GB[, mem usage=W GB]."
  (no mem usage before 0.4.3; 0.4.3.post4 :391, 0.5.23 :1373); "Using KV cache dtype: D" (0.5.3 :1425);
  "Memory pool end. avail mem=X GB"; "Capture cuda graph begin. ... avail mem=X GB";
  "Capture cuda graph bs [...]"; "Capture cuda graph end. Time elapsed: S s[. avail mem=A GB. mem
  usage=U GB.]"
  (0.4.3.post4 :845, avail first) / "... mem usage=U GB. avail mem=A GB." (0.4.6.post5 :1101) /
  "Capture <name> CUDA graph end. elapsed=S s, mem usage=U GB, avail mem=A GB." (0.5.23
  cuda_graph_setup.py:696); "Capture piecewise CUDA graph end. ..." (0.5.6 :2498).
- mem_cache/memory_pool.py: "KV Cache is allocated. [dtype: D, ]#tokens: N, K size: K GB, V size: V GB"
  (0.4.3.post4 :211) and the MLA pool's "... #tokens: N, KV size: S GB" (0.4.6.post5 :554); before 0.4.3
  "KV Cache is allocated. K size: K GB, V size: V GB."; hybrid models add "Mamba Cache is allocated.
  max_mamba_cache_size: M, conv_state size: C GB, ssm_state size: S GB".
- managers/scheduler.py: "max_total_num_tokens=N, chunked_prefill_size=C, max_prefill_tokens=P,
  max_running_requests=R, context_len=L[, available_gpu_mem=X GB]" (available_gpu_mem from 0.4.7).
- model_runner.py (init_memory_pool): "max_total_tokens=T is larger than the profiled value P. Use the
  profiled value instead." (0.4.6.post5 :883): the pool SGLang computed before --max-total-tokens capped it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner import limits
from planner.engines.base import ANSI, Figure, FigureLookups, LineReader, plausible, read_all

# Stages a start-up goes through, in order; a log that stops before "pool" died (or was cut) there.
STAGES = ("start", "config", "weights", "pool", "graphs", "ready")
STAGE_WORDS = {
    "start": "at start-up, before it printed its server arguments",
    "config": "after the server arguments, before the weights finished loading",
    "weights": "after loading the weights, before the KV cache was allocated",
    "pool": "after allocating the KV cache, during CUDA graph capture",
    "graphs": "after CUDA graph capture, before the server was ready",
    "ready": "the server was ready",
}

# "[2025-03-08 12:29:21 TP0] msg", "[2025-11-04 05:27:13 DP0 TP0 EP0] msg", "[2026-02-04 11:30:29] msg",
# "[20:52:05] msg"; docker compose / journald text may come before it.
_HEADER = re.compile(
    r"\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:\.\d+)?"
    r"(?P<ranks>(?: (?:DP|TP|PP|EP|CP|ATTN_DP|MOE_DP)\d+)*)\] ?"
    r"(?P<msg>.*)$"
)
_NUM = r"(-?\d+(?:\.\d+)?)"


@dataclass(frozen=True, slots=True)
class SGLangLog(FigureLookups):
    """What an SGLang server log says. `figures` maps a stable name to every occurrence (first one first)."""

    is_sglang: bool
    model: str | None
    args: Mapping[str, str]  # server_args=ServerArgs(...) pairs, then the command line's flags
    figures: Mapping[str, tuple[Figure, ...]]
    capture_bs: tuple[int, ...]  # "Capture cuda graph bs [...]" (or the server_args' cuda_graph_bs)
    capture_bs_line: int | None
    capture_count: int | None  # how many decode graphs, from the list or the capture's progress bar
    capture_count_line: int | None
    model_class: str | None  # "Load weight end. type=Qwen2ForCausalLM"
    kv_dtype: str | None  # "Using KV cache dtype: torch.bfloat16" / "KV Cache is allocated. dtype: ..."
    era: str | None  # the release range the wording dates the log to (see ERA_MARKS); None: not dated
    era_line: int | None
    stage: str
    error: str | None
    error_line: int | None
    lines: int
    notes: tuple[str, ...] = ()

    def setting(self, *names: str) -> str | None:
        """A server argument ("None" and "" count as not given)."""
        for name in names:
            value = self.args.get(name)
            if value not in (None, "None", ""):
                return value
        return None

    @property
    def finished(self) -> bool:
        return STAGES.index(self.stage) >= STAGES.index("pool")


# (pattern, ((figure name, unit), ...) for its groups); every "GB" is GiB (see the module docstring)
_FIGURES: tuple[tuple[re.Pattern[str], tuple[tuple[str, str], ...]], ...] = (
    (
        re.compile(rf"Init torch distributed ends\.(?: elapsed={_NUM} s,)? mem usage={_NUM} GB"),
        (("", ""), ("distributed_init", "GiB")),
    ),
    (re.compile(rf"Load weight begin\. avail mem={_NUM} GB"), (("free_before_weights", "GiB"),)),
    (
        re.compile(rf"Load weight end\..*?avail mem={_NUM} GB(?:, mem usage={_NUM} GB)?"),
        (("free_after_weights", "GiB"), ("weights", "GiB")),
    ),
    (re.compile(r"KV Cache is allocated\..*?#tokens: (\d+)"), (("kv_tokens", "tokens"),)),
    (
        re.compile(rf"KV Cache is allocated\..*?K size: {_NUM} GB, V size: {_NUM} GB"),
        (("k_size", "GiB"), ("v_size", "GiB")),
    ),
    (re.compile(rf"KV Cache is allocated\..*?KV size: {_NUM} GB"), (("kv_size", "GiB"),)),
    (
        re.compile(
            rf"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: {_NUM} ?GB, "
            rf"ssm_state size: {_NUM} ?GB"
        ),
        (("mamba_slots", ""), ("mamba_conv", "GiB"), ("mamba_ssm", "GiB")),
    ),
    (re.compile(rf"Memory pool end\. avail mem={_NUM} GB"), (("free_after_pool", "GiB"),)),
    (re.compile(rf"Capture cuda graph begin\..*?avail mem={_NUM} GB"), (("free_before_graphs", "GiB"),)),
    # the decode graphs: "Capture cuda graph end" (<= 0.5.x) / "Capture target decode CUDA graph end" (0.5.2x)
    (
        re.compile(rf"Capture (?:cuda graph|(?:target )?decode CUDA graph) end\..*?mem usage={_NUM} GB"),
        (("graphs", "GiB"),),
    ),
    (
        re.compile(rf"Capture (?:cuda graph|(?:target )?decode CUDA graph) end\..*?avail mem={_NUM} GB"),
        (("free_after_graphs", "GiB"),),
    ),
    (
        re.compile(rf"Capture piecewise CUDA graph end\..*?mem usage={_NUM} GB"),
        (("piecewise_graphs", "GiB"),),
    ),
    (re.compile(r"max_total_num_tokens=(\d+)"), (("max_total_num_tokens", "tokens"),)),
    (re.compile(r"max_total_num_tokens=\d+.*?max_running_requests=(\d+)"), (("max_running_requests", ""),)),
    (re.compile(r"max_total_num_tokens=\d+.*?context_len=(\d+)"), (("context_len", "tokens"),)),
    (re.compile(r"max_total_num_tokens=\d+.*?chunked_prefill_size=(-?\d+)"), (("chunked_prefill_size", ""),)),
    (re.compile(rf"max_total_num_tokens=\d+.*?available_gpu_mem={_NUM} GB"), (("free_when_ready", "GiB"),)),
    (
        re.compile(r"max_total_tokens=\d+ is larger than the profiled value (-?\d+)"),
        (("profiled_tokens", "tokens"),),
    ),
)

_STAGE_MARKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("config", re.compile(r"server_args=ServerArgs\(|Init torch distributed begin|Load weight begin")),
    ("weights", re.compile(r"Load weight end\.")),
    ("pool", re.compile(r"KV Cache is allocated|Memory pool end\.")),
    ("graphs", re.compile(r"Capture (?:cuda graph|(?:target )?decode CUDA graph) end|max_total_num_tokens=")),
    (
        "ready",
        re.compile(
            r"The server is fired up and ready to roll|Application startup complete|"
            r"Uvicorn running on"
        ),
    ),
)

# The release range a wording dates a log to, latest evidence wins (each mark names what it follows).
ERA_MARKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # 0.3.x - 0.4.2: "Load weight end" without mem usage (0.3.6 model_runner.py:309)
    ("<=0.4.2", re.compile(r"Load weight end\. type=[^,]+, dtype=[^,]+, avail mem=[\d.]+ GB\s*$")),
    # 0.4.3 - 0.4.5: the graph line gives avail mem before mem usage (0.4.3.post4 model_runner.py:845)
    ("0.4.3-0.4.5", re.compile(r"Capture cuda graph end\. Time elapsed: [\d.]+ s\. avail mem=")),
    # 0.4.6: mem usage first, no available_gpu_mem yet (0.4.6.post5 :1101, scheduler.py:334)
    # 0.4.7+: the scheduler line ends with available_gpu_mem (0.4.7 scheduler.py)
    (">=0.4.7", re.compile(r"max_total_num_tokens=.*available_gpu_mem=")),
    # 0.5.x: "elapsed=" in the load lines (0.5.23 model_runner.py:1373)
    (">=0.5", re.compile(r"Load weight end\. elapsed=|Init torch distributed ends\. elapsed=")),
)

_ERROR = re.compile(
    r"((?:torch\.)?(?:cuda\.)?OutOfMemoryError:.*|RuntimeError:.*|ValueError:.*|AssertionError:.*|"
    r"CUDA out of memory.*|Not enough memory\..*)"
)
_SERVER_ARGS = re.compile(r"server_args=ServerArgs\((.*)")
_COMMAND = re.compile(r"((?:python3?(?:\.\d+)? -m sglang\.launch_server|sglang serve)\s.*)$")
_BS_LIST = re.compile(r"Capture cuda graph bs \[([\d,\s.]*)\]")
_KV_DTYPE = re.compile(r"(?:Using KV cache dtype: |KV Cache is allocated\. dtype: )(?:torch\.)?([\w]+)")
# "TensorRT-LLM MHA only supports page_size of 16, 32 or 64, changing page_size from None to 64."
# (logged by server_args)
_PAGE_CHANGE = re.compile(r"changing page_size from \S+ to (\d+)")
_CAPTURE_BAR = re.compile(r"\|\s*\d{1,9}/(\d{1,9}) \[")
_MODEL_CLASS = re.compile(r"Load weight end\..*?type=([\w.]+)")
# flags of the command line that are spelled differently in ServerArgs
_FLAG_ALIASES = {
    "model": "model_path",
    "tp": "tp_size",
    "tensor_parallel_size": "tp_size",
    "pp": "pp_size",
    "pipeline_parallel_size": "pp_size",
    "dp": "dp_size",
    "data_parallel_size": "dp_size",
    "ep": "ep_size",
    "context_length": "context_length",
}


def strip_line(raw: str) -> tuple[str, str, bool]:
    """(message, rank tags, has an SGLang header) of one raw line: ANSI colours and every prefix removed."""
    line = ANSI.sub("", raw).rstrip("\r\n")
    header = _HEADER.search(line)
    if header is None:
        return line.strip(), "", False
    return header.group("msg").strip(), header.group("ranks").strip(), True


def server_args_pairs(text: str) -> dict[str, str]:
    """key=value pairs of a ServerArgs(...) repr: quoted values keep their commas, nested [...]/{...}/(...)
    too; a value the paste cut off (or elided with "...") is left out, never guessed."""
    pairs: dict[str, str] = {}
    i, n = 0, len(text)
    key_at = re.compile(r"\s*([A-Za-z_]\w*)=")
    while i < n:
        m = key_at.match(text, i)
        if not m:
            nxt = text.find(",", i)
            if nxt < 0:
                break
            i = nxt + 1
            continue
        j = k = m.end()
        depth, quote = 0, ""
        while k < n:
            ch = text[k]
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                if depth == 0:
                    break  # the closing parenthesis of ServerArgs(
                depth -= 1
            elif ch == "," and depth == 0:
                break
            k += 1
        if quote or depth > 0:
            break  # cut inside this value
        value = text[j:k].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        pairs.setdefault(m.group(1), value)
        i = k + 1
    return pairs


def command_args(command: str) -> dict[str, str]:
    """The flags of a `python -m sglang.launch_server --model-path M --tp 4 ...` line, under ServerArgs
    names."""
    try:
        words = shlex.split(command.replace("\\\n", " "))
    except ValueError:
        words = command.split()
    args: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            key, eq, value = word[2:].partition("=")
            key = key.replace("-", "_")
            key = _FLAG_ALIASES.get(key, key)
            if not eq:
                if i + 1 < len(words) and not words[i + 1].startswith("--"):
                    value = words[i + 1]
                    i += 1
                else:
                    value = "True"
            args.setdefault(key, value)
        i += 1
    return args


@dataclass
class _State:
    model: str | None = None
    args: dict[str, str] = field(default_factory=dict)
    figures: dict[str, list[Figure]] = field(default_factory=dict)
    capture_bs: tuple[int, ...] = ()
    capture_bs_line: int | None = None
    capture_count: int | None = None
    capture_count_line: int | None = None
    model_class: str | None = None
    kv_dtype: str | None = None
    era: str | None = None
    era_line: int | None = None
    stage: str = "start"
    error: str | None = None
    error_line: int | None = None
    lines: int = 0
    sglang_lines: int = 0
    notes: list[str] = field(default_factory=list)


class LogReader(LineReader):
    """Incremental reader: feed() lines (or chunks of text), result() at any time."""

    def __init__(self) -> None:
        self._s = _State()
        self._command = ""  # a `python -m sglang.launch_server ... \` command continued over lines

    def feed(self, raw: str) -> None:
        s = self._s
        s.lines += 1
        n = s.lines
        # a tqdm bar can carry the next log line on the same physical line
        # ("... it/s][2025-03-08 ... TP1] ...")
        for piece in re.split(r"(?=\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", raw):
            msg, rank, has_header = strip_line(piece)
            if msg:
                self._message(msg, rank, has_header, n)

    def _message(self, msg: str, rank: str, has_header: bool, n: int) -> None:
        s = self._s
        if not has_header and (self._command or (msg.endswith("\\") and _COMMAND.search(msg))):
            self._command += " " + msg.rstrip("\\").strip()
            if msg.endswith("\\"):
                return
            msg, self._command = self._command.strip(), ""
        args = _SERVER_ARGS.search(msg)
        if args:
            for key, value in server_args_pairs(args.group(1)).items():
                s.args[key] = value  # the server's own record wins over a command line read earlier
            s.model = s.args.get("model_path") or s.model
            s.sglang_lines += 1
        elif not has_header:
            cmd = _COMMAND.search(msg)
            if cmd:
                for key, value in command_args(cmd.group(1)).items():
                    s.args.setdefault(key, value)
                s.model = s.model or s.args.get("model_path")
        matched = self._figures(msg, rank, n)
        if matched or args:
            s.sglang_lines += int(matched)
        self._details(msg, n)
        for stage, pattern in _STAGE_MARKS:
            if pattern.search(msg):
                self._stage(stage)
        for era, pattern in ERA_MARKS:
            if pattern.search(msg) and (s.era is None or _ERA_ORDER.index(era) >= _ERA_ORDER.index(s.era)):
                s.era, s.era_line = era, n
        if s.error is None:
            err = _ERROR.search(msg)
            if err:
                s.error, s.error_line = err.group(1).strip()[:300], n

    def _figures(self, msg: str, rank: str, n: int) -> bool:
        matched = False
        for pattern, names in _FIGURES:
            m = pattern.search(msg)
            if not m:
                continue
            matched = True
            for (name, unit), text in zip(names, m.groups(), strict=False):
                if name and text is not None:
                    self._add(name, unit, text, n, rank)
        return matched

    def _details(self, msg: str, n: int) -> None:
        s = self._s
        # tqdm's bar counts the decode graphs when the list is not printed ("| 0/13 [", "100% | 52/52 [")
        bar = _CAPTURE_BAR.search(msg)
        if bar and s.stage == "pool" and s.capture_count is None:
            s.capture_count, s.capture_count_line = int(bar.group(1)), n
        bs = _BS_LIST.search(msg)
        if bs and not s.capture_bs:
            values = [int(v) for v in re.findall(r"\d{1,9}", bs.group(1))]  # a batch size, not 5,000 digits
            if values and "..." not in bs.group(1):
                s.capture_bs, s.capture_bs_line = tuple(values), n
        page = _PAGE_CHANGE.search(msg)
        if page:
            s.args.setdefault("page_size", page.group(1))
        kv = _KV_DTYPE.search(msg)
        if kv and s.kv_dtype is None:
            s.kv_dtype = kv.group(1)
        cls = _MODEL_CLASS.search(msg)
        if cls and s.model_class is None:
            s.model_class = cls.group(1)

    def _stage(self, stage: str) -> None:
        if STAGES.index(stage) > STAGES.index(self._s.stage):
            self._s.stage = stage

    def _add(self, name: str, unit: str, text: str, line: int, rank: str) -> None:
        value = limits.logged_number(text)
        if value is None:  # inf, nan, 1e999: no figure SGLang prints
            return
        if not plausible(value, unit):
            return
        self._s.figures.setdefault(name, []).append(Figure(name, value, unit, text, line, rank))

    def result(self) -> SGLangLog:
        s = self._s
        is_sglang = bool(s.figures) and (bool(s.args) or s.sglang_lines >= 2)
        capture_bs, capture_line = s.capture_bs, s.capture_bs_line
        if not capture_bs:
            listed = s.args.get("cuda_graph_bs", "")
            values = re.findall(r"\d{1,9}", listed)  # batch sizes, not a run of 5,000 digits
            if listed.startswith("[") and values:
                capture_bs = tuple(int(v) for v in values)
        return SGLangLog(
            is_sglang=is_sglang,
            model=s.model,
            args=dict(s.args),
            figures={k: tuple(v) for k, v in s.figures.items()},
            capture_bs=capture_bs,
            capture_bs_line=capture_line,
            capture_count=len(capture_bs) if s.capture_bs else s.capture_count,
            capture_count_line=capture_line if s.capture_bs else s.capture_count_line,
            model_class=s.model_class,
            kv_dtype=s.kv_dtype,
            era=s.era,
            era_line=s.era_line,
            stage=s.stage,
            error=s.error,
            error_line=s.error_line,
            lines=s.lines,
            notes=tuple(s.notes),
        )


_ERA_ORDER = tuple(era for era, _ in ERA_MARKS)


def parse_log(text: str | Iterable[str]) -> SGLangLog:
    """Parse a whole log (a string, or an iterable of lines)."""
    return read_all(LogReader(), text)


def looks_like_sglang(text: str) -> bool:
    """Cheap recognition from the first lines: an SGLang-only wording is there."""
    return bool(
        re.search(
            r"server_args=ServerArgs\(|KV Cache is allocated\.|Load weight (?:begin|end)\.|"
            r"max_total_num_tokens=|sglang\.launch_server|sglang serve",
            text,
        )
    )


def args_value(args: Mapping[str, Any], key: str) -> str | None:
    value = args.get(key)
    return None if value in (None, "None", "") else str(value)
