"""The limits every memsight reader enforces, in one place, and the two helpers that apply them to files.

Each limit is named; each refusal names the limit it hit ("... over MAX_CONFIG_BYTES = 16 MiB"), so a user can
tell a broken file from a legitimately big one. The values are far above anything real (the largest real
model in shared/configs, checkpoints of the largest open models, hour-long recordings) and far below what
would hang, exhaust memory or overflow an int64.

This module is a leaf: standard library only, nothing else of memsight. The collectors import it too (it is
the one exception to `collectors` not importing `planner`: limits are not planning), and they pass their own
error class to the helpers so messages keep the CollectorError/PlannerError contract.

Readers open files with `read_regular()`: O_NONBLOCK (a FIFO cannot block the open), fstat on the open
descriptor (no race between the check and the read), only regular files, at most `limit` bytes read.
JSON is parsed with `loads_json()`: bounded size, depth and integer digits, no NaN/Infinity literals.
"""

from __future__ import annotations

import functools
import math
import os
import stat

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `--help` does not pay for it
if TYPE_CHECKING:
    from typing import Any

MiB = 2**20

# ---- files
MAX_CONFIG_BYTES = 16 * MiB  # a config.json (real ones: under 100 KiB) or model.safetensors.index.json
MAX_INDEX_BYTES = 64 * MiB  # model.safetensors.index.json (DeepSeek-V3: 9 MiB for 91k tensors)
MAX_SAFETENSORS_HEADER = 32 * MiB  # one safetensors JSON header (the reference implementation allows 100 MB)
MAX_TENSORS = 2_000_000  # tensors in one checkpoint (Kimi-K2: 70k; GGUF files: a few thousand)
MAX_RECORDING_BYTES = 1024 * MiB  # a memsight recording (one hour of a 8-GPU box at 2 Hz: about 60 MiB)
MAX_RECORDING_LINE = 4 * MiB  # one JSON line of a recording (an os event of 10k processes: about 1 MiB)
MAX_TOML_BYTES = 1 * MiB  # memsight's config.toml (a real one: under 1 KiB)
MAX_LOG_BYTES = 64 * MiB  # an engine's start-up log for `memsight explain` (real ones: a few MB at most)
# one line of an engine's log; the longest in the published logs here is SGLang's server_args, 10 KB. Longer
# lines are not read: every engine reader's regexes then stay within a bounded cost per line
MAX_LOG_LINE = 256 * 1024
MAX_MEMINFO_BYTES = 1 * MiB  # a /proc/meminfo or a saved copy (real ones: about 1.5 KiB)
MAX_NAME_CHARS = 1024  # a model name / path given on the command line (PATH_MAX is 4096, NAME_MAX 255)

# ---- JSON shape
MAX_JSON_DEPTH = 64  # nesting of objects/arrays (real configs: 4; safetensors headers: 3)
MAX_INT_DIGITS = 24  # digits of one JSON integer (int64 has 19; a 10**400 "hidden_size" is refused)
MAX_STRING_CHARS = 65536  # one string value of a recording event (a command line is capped at 4 KiB)

# ---- plausible model dimensions (a config.json outside these is refused, naming the bound)
MAX_LAYERS = 4096  # num_hidden_layers (largest real: 126)
MAX_HIDDEN_SIZE = 1 << 20  # hidden_size, intermediate sizes, head dims (largest real: 53248)
MAX_HEADS = 1 << 16  # attention / KV / linear / Mamba heads
MAX_VOCAB = 1 << 24  # vocab_size (largest real: 262144)
MAX_EXPERTS = 1 << 16  # routed experts (largest real: 384)
MAX_POSITIONS = 1 << 34  # max_position_embeddings (largest real: 10M)
MAX_CONFIG_INT = 1 << 48  # any other integer field of a config (windows, ranks, kernel sizes, group sizes)
MAX_PARALLEL = 1 << 16  # GPUs in one tensor- or pipeline-parallel group (the largest real: a few hundred)

# ---- numbers read from measurements (recordings, agent rings)
MAX_MEASURED = 2**63  # a byte count, counter or pid: int64 range (anything above is not a measurement)
MAX_TIMESTAMP = 2**33  # seconds since the epoch (year 2242): a "created" or "t" above is not a time

# ---- memsight's own settings (config.toml and the matching command-line options)
MIN_REFRESH_HZ = 0.001  # refresh_hz / --hz: once in 1000 s at the slowest
MAX_REFRESH_HZ = 100  # ... and 100 times a second at the fastest (the screen cannot show more)

# ---- agent ring files
MAX_RING_CAPACITY = 1 << 16  # slots in one ring (the agent writes 512)
MAX_RING_FILES = 1024  # ring files looked at per scan of the agent directory
MAX_RING_BYTES = 64 * MiB  # one ring file mapped by the monitor


_BYTE_LIMITS = ("_BYTES", "_HEADER", "_LINE")


def human(limit: int, in_bytes: bool = False) -> str:
    """A limit as people say it: 16 MiB (a size), 4096, 2**63."""
    if in_bytes and limit % MiB == 0:
        return f"{limit // MiB} MiB"
    if limit >= 2**32 and limit & (limit - 1) == 0:
        return f"2**{limit.bit_length() - 1}"
    return str(limit)


def bound(name: str) -> str:
    """'NAME = value', for messages: the limit named as in this module."""
    return f"{name} = {human(globals()[name], name.endswith(_BYTE_LIMITS))}"


def read_regular(
    path: str | os.PathLike, limit: str, error: type[Exception], what: str = "file"
) -> bytes:
    """The bytes of a regular file of at most the named limit; anything else is one `error` naming path.

    `limit` is the name of a limit in this module (MAX_CONFIG_BYTES, ...). A FIFO, device, socket or
    directory is refused without blocking; so is a file over the limit, before it is read.
    """
    max_bytes = globals()[limit]
    fd, st = _open_regular(path, error, what)
    try:
        if st.st_size > max_bytes:
            raise error(f"{path}: {st.st_size} bytes, over {bound(limit)}: not a plausible {what}")
        chunks = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 4 * MiB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew while being read
        raise error(f"{path}: over {bound(limit)}: not a plausible {what}")
    return data


def open_regular(path: str | os.PathLike, error: type[Exception], what: str = "file") -> int:
    """An O_RDONLY descriptor of a regular file (the caller closes it); FIFOs and devices are refused
    without blocking."""
    return _open_regular(path, error, what)[0]


def _open_regular(path: str | os.PathLike, error: type[Exception], what: str) -> tuple[int, os.stat_result]:
    """open_regular's descriptor with its fstat (read_regular checks the size on it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise error(f"{path}: not a regular file ({_kind(st.st_mode)}), so not a {what}")
    return fd, st


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a plain file"


class JSONLimitError(ValueError):
    """Raised by loads_json: the text is not JSON, or JSON beyond the limits; str() says which."""


def _parse_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS + 1:  # + a sign
        raise JSONLimitError(f"an integer of {len(text)} digits, over {bound('MAX_INT_DIGITS')}")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONLimitError(f"the number {text[:40]} is not finite")
    return value


def _parse_constant(text: str) -> float:
    raise JSONLimitError(f"{text} is not a JSON number")


def loads_json(text: str | bytes, *, finite_only: bool = True, shaped: bool = False) -> Any:
    """json.loads with the limits: integers of at most MAX_INT_DIGITS digits, nesting at most
    MAX_JSON_DEPTH, and (finite_only) no NaN/Infinity. Raises JSONLimitError (a ValueError) with one line
    saying what is wrong; the caller adds the file name. Linear in the text.

    finite_only=False is for config.json: real ones hold Infinity (Nemotron-H's time_step_limit), which
    the planner never reads; the fields it reads are checked one by one.
    shaped=True is for a caller that checks every value it reads against a fixed shape (a recording's lines,
    a million a day): the integers, the floats' finiteness and the nesting are left to that check (CPython
    still refuses an integer of more than 4,300 digits, and nesting too deep for its parser: JSONLimitError;
    a float too large for a double reads as infinity, which every shape's number check refuses), saving a
    Python call per number and a walk of every line. The decoders are made once (json.loads with keywords
    makes a new one per call: a fifth of a recording line's parse)."""
    import json  # noqa: PLC0415  (here: `memsight plan --help` reads the limits, never JSON)

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONLimitError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        if text.startswith("\ufeff"):  # json.loads' own check, which JSONDecoder.decode leaves to it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = _decoder("shaped" if shaped else "finite" if finite_only else "config").decode(text)
    except json.JSONDecodeError as exc:
        raise JSONLimitError(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise JSONLimitError(f"JSON nested deeper than {bound('MAX_JSON_DEPTH')}") from None
    except ValueError as exc:  # CPython's own limit on an integer's digits
        raise JSONLimitError(f"{str(exc)[:80]}") from None
    if not shaped:
        check_depth(value)
    return value


@functools.cache
def _decoder(kind: str) -> Any:
    """One json.JSONDecoder per kind of loads_json call (json.loads builds one a call given keywords)."""
    import json  # noqa: PLC0415

    if kind == "shaped":
        return json.JSONDecoder(parse_constant=_parse_constant)
    if kind == "finite":
        return json.JSONDecoder(
            parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
        )
    return json.JSONDecoder(parse_int=_parse_int)


def check_depth(value: Any) -> None:
    """JSONLimitError if containers nest deeper than MAX_JSON_DEPTH (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise JSONLimitError(f"JSON nested deeper than {bound('MAX_JSON_DEPTH')}")
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


def logged_number(text: str) -> float | None:
    """A number as a log printed it ("53.29", "1,024", "-3"), or None when it is no figure a program logs:
    not a number, or not finite within MAX_MEASURED (inf, nan, 1e999, a run of 5,000 digits)."""
    try:
        value = float(text.replace(",", "").strip())
    except ValueError:
        return None
    return value if finite(value) else None


def finite(value: Any, lo: float = -float(MAX_MEASURED), hi: float = float(MAX_MEASURED)) -> bool:
    """True for an int or float (not bool) that is finite and within [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return lo <= value <= hi


# config.json integer fields -> the limit that bounds them (any other integer field: MAX_CONFIG_INT)
CONFIG_FIELD_LIMITS: dict[str, str] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "mtp_num_hidden_layers"), "MAX_LAYERS"),
    **dict.fromkeys(
        ("hidden_size", "n_embd", "intermediate_size", "n_inner", "moe_intermediate_size",
         "shared_expert_intermediate_size", "head_dim", "attention_head_dim", "kv_lora_rank", "q_lora_rank",
         "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "linear_key_head_dim", "linear_value_head_dim",
         "mamba_head_dim", "ssm_state_size"),
        "MAX_HIDDEN_SIZE",
    ),
    **dict.fromkeys(
        ("num_attention_heads", "n_head", "num_key_value_heads", "linear_num_key_heads",
         "linear_num_value_heads", "mamba_num_heads", "n_groups"),
        "MAX_HEADS",
    ),
    "vocab_size": "MAX_VOCAB",
    **dict.fromkeys(
        ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "n_shared_experts"),
        "MAX_EXPERTS",
    ),
    **dict.fromkeys(("max_position_embeddings", "n_positions"), "MAX_POSITIONS"),
}  # fmt: skip


def config_int_limit(key: str) -> str:
    """The name of the limit bounding integer config field `key`."""
    return CONFIG_FIELD_LIMITS.get(key, "MAX_CONFIG_INT")
