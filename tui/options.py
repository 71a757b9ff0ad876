"""What users type, parsed in one place: the CLI, the Plan screen and the config file all use these.

* counts (tokens, users, ranks): ``8192``, ``8,192``, ``8_192``, ``32k``, ``128K``, ``1.5k``, ``1M``.
  ``k`` is 1024 and ``M`` is 1024**2, as in "128K context" = 131,072 tokens; the result must be whole.
* sizes: ``24`` (in the option's unit, GiB unless said otherwise), ``1.5GiB``, ``1536 MiB``, ``80GB``.
  ``KiB/MiB/GiB/TiB`` and the bare ``K/M/G/T`` are binary (2**10 ...); ``KB/MB/GB/TB`` are decimal
  (10**3 ...), as the project's units convention says (GiB for memory, GB where the source is decimal).
  Case does not matter. The result is an int number of bytes.
* numbers (rates, fractions): a finite float.
* choices: case-insensitive (``--machine Spark`` is ``spark``).

Every parser raises `InputError` (a ValueError) whose message names what was being parsed and shows what
was typed; `argparse_type` turns a parser into an argparse ``type=`` callable. Standard library only, so
`memsight plan` pays nothing for it.
"""

from __future__ import annotations

import argparse
import math
import re

from planner import limits

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: `--help` does not pay for it
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

# The plan inputs' defaults for every command and the config file (the lesson's: Llama 3.1 8B, its own
# weights, KV in the model's dtype, 8K context, 8 users, one rank).
DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_FORMAT: str | None = None  # None: the checkpoint's own (torch_dtype / quantization_config)
DEFAULT_KV_DTYPE = "auto"
DEFAULT_CONTEXT = 8192
DEFAULT_USERS = 8
DEFAULT_TP = 1

KV_AUTO_HELP = (
    "auto = the dtype the model's config.json names (torch_dtype; float32 when it names none, as "
    "transformers loads it), NOT the --format of the weights: --format fp8 keeps a bf16 cache; fp8 halves it"
)

_COUNT_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}
_SIZE_UNITS = {
    "b": 1,
    "k": 2**10, "kib": 2**10, "kb": 10**3,
    "m": 2**20, "mib": 2**20, "mb": 10**6,
    "g": 2**30, "gib": 2**30, "gb": 10**9,
    "t": 2**40, "tib": 2**40, "tb": 10**12,
}  # fmt: skip
_NUMBER = r"[0-9][0-9,_]*(?:\.[0-9]+)?|\.[0-9]+"
# a count reads its sign, so that "-3" is refused as below the minimum, not as something other than a number.
# Patterns, not compiled ones: re compiles (and caches) them on first use, so `--help` never pays for them.
_COUNT_PATTERN = rf"\s*(-?(?:{_NUMBER}))\s*([a-z]?)\s*"
_SIZE_PATTERN = rf"\s*({_NUMBER})\s*([a-z]*)\s*"


class InputError(ValueError):
    """A value the user typed that cannot be used; the message says what and why."""


def _digits(text: str, what: str, raw: object) -> float:
    # "8,192" and "8_192" are thousands separators; a comma elsewhere ("8,19") is a typo, not 819
    whole, dot, frac = text.partition(".")
    groups = re.split(r"[,_]", whole)
    if len(groups) > 1 and (not groups[0] or len(groups[0]) > 3 or any(len(g) != 3 for g in groups[1:])):
        raise InputError(f"{what}: {raw!r} has a misplaced thousands separator (write 8192 or 8,192)")
    return float("".join(groups) + dot + frac)


def parse_count(value: object, what: str, *, minimum: int = 0) -> int:
    """A whole number of tokens / users / ranks: 8192, '8,192', '32k', '128K', '1.5k'."""
    if isinstance(value, bool):
        raise InputError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():
            raise InputError(f"{what} must be a whole number, got {value!r}")
        number = int(value)
    else:
        match = re.fullmatch(_COUNT_PATTERN, str(value), re.IGNORECASE)
        suffix = match.group(2).lower() if match else ""
        if not match or suffix not in _COUNT_SUFFIX:
            raise InputError(f"{what}: {value!r} is not a whole number (e.g. 8192, 8,192, 32k or 128K)")
        exact = _digits(match.group(1), what, value) * _COUNT_SUFFIX[suffix]
        if not exact.is_integer():
            raise InputError(f"{what}: {value!r} is not a whole number of tokens/users ({exact:g})")
        number = int(exact)
    if number < minimum:
        raise InputError(f"{what} must be at least {minimum}, got {value}")
    return number


def parse_size(
    value: object, what: str, *, unit: str = "GiB", minimum: float = 0, strict: bool = False
) -> int:
    """Bytes from '1.5GiB', '1536 MiB', '80GB' or a bare number in `unit` (GiB by default)."""
    if isinstance(value, bool):
        raise InputError(f"{what} must be a size (e.g. 24 or 1.5GiB), got {value!r}")
    default = _SIZE_UNITS[unit.lower()]
    if isinstance(value, int | float):
        amount, scale = float(value), default
    else:
        match = re.fullmatch(_SIZE_PATTERN, str(value), re.IGNORECASE)
        suffix = match.group(2).lower() if match else ""
        if not match or (suffix and suffix not in _SIZE_UNITS):
            raise InputError(
                f"{what}: {value!r} is not a size (e.g. 24 meaning {unit}, 1.5GiB, 512MiB or 80GB)"
            )
        amount, scale = _digits(match.group(1), what, value), _SIZE_UNITS[suffix] if suffix else default
    if not math.isfinite(amount):
        raise InputError(f"{what} must be a finite size, got {value!r}")
    if not math.isfinite(amount * scale) or abs(amount * scale) > limits.MAX_MEASURED:
        raise InputError(f"{what} is {value!r}, over {limits.bound('MAX_MEASURED')} bytes")
    number = round(amount * scale)
    if number < minimum * default or (strict and number <= minimum * default):
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise InputError(f"{what} must be {bound} {unit}, got {value}")
    return number


def parse_number(value: object, what: str, *, minimum: float = 0, strict: bool = False) -> float:
    """A finite float at least (or, strict, above) `minimum`: refresh rates, fractions, speeds."""
    if isinstance(value, bool):
        raise InputError(f"{what} must be a number, got {value!r}")
    try:
        number = float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise InputError(f"{what} must be a finite number, got {value!r}")
    if number < minimum or (strict and number <= minimum):
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise InputError(f"{what} must be {bound}, got {value}")
    return number


def parse_refresh_hz(value: object, what: str) -> float:
    """A refresh rate within [MIN_REFRESH_HZ, MAX_REFRESH_HZ] (inf once killed the sampling thread, and a
    rate of 1e-300 Hz overflows the thread's wait)."""
    hz = parse_number(value, what, strict=True)
    if not limits.MIN_REFRESH_HZ <= hz <= limits.MAX_REFRESH_HZ:
        raise InputError(
            f"{what} is {hz:g}, outside {limits.bound('MIN_REFRESH_HZ')} .. {limits.bound('MAX_REFRESH_HZ')}"
        )
    return hz


def parse_choice(value: object, choices: Iterable[str], what: str) -> str:
    """One of `choices`, whatever its case ('Spark' -> 'spark'); the message lists them."""
    options = list(choices)
    wanted = str(value).strip().lower()
    for option in options:
        if option.lower() == wanted:
            return option
    raise InputError(f"{what}: {value!r} is not one of {', '.join(options)}")


def argparse_type(parse: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[str], Any]:
    """`parse(text, *args, **kwargs)` as an argparse `type=`: its InputError becomes argparse's error, without
    the option's name in front (argparse writes "argument --users: " itself)."""
    what = next((a for a in args if isinstance(a, str)), None)  # the name the parser's messages start with

    def convert(text: str) -> Any:
        try:
            return parse(text, *args, **kwargs)
        except InputError as exc:
            message = str(exc)
            if what is not None and message.startswith(what):
                message = message.removeprefix(what).removeprefix(":").lstrip()
            raise argparse.ArgumentTypeError(message) from None

    convert.__name__ = parse.__name__.removeprefix("parse_")  # argparse names it in "invalid X value"
    return convert


def add_plan_input_arguments(group: Any) -> None:
    """The plan inputs every command shares, with the same names, parsers and meaning. Defaults are None
    here: the config file's [plan] values (tui/config.py) and then the DEFAULT_* above fill what is not
    given, so `memsight plan`, `watch`, `run`, `replay` and the Plan screen start from the same plan."""
    group.add_argument(
        "--format",
        dest="format",
        metavar="FMT",
        help="weight format: bf16 fp16 fp32 fp8 int8 q8_0 q4_k_m awq gptq mxfp4 nvfp4, or 'default' "
        "(the checkpoint's own, the default)",
    )
    group.add_argument(
        "--kv-dtype", metavar="DTYPE", help=f"KV cache dtype: auto (default), fp8, bf16, ...; {KV_AUTO_HELP}"
    )
    group.add_argument(
        "--context",
        "--ctx",
        dest="context",
        metavar="TOKENS",
        type=argparse_type(parse_count, "--context", minimum=1),
        help=f"prompt tokens per user, e.g. 8192, 8,192, 32k (k = 1024; default {DEFAULT_CONTEXT})",
    )
    group.add_argument(
        "--users",
        metavar="N",
        type=argparse_type(parse_count, "--users", minimum=1),
        help=f"concurrent users (default {DEFAULT_USERS})",
    )
    group.add_argument(
        "--tp",
        metavar="N",
        type=argparse_type(parse_count, "--tp", minimum=1),
        help=f"tensor parallel size (default {DEFAULT_TP})",
    )


# Options `memsight run` and `memsight watch` share: here, not in tui/cmd_run.py, so that `memsight watch`
# does not import `run`'s module (its subprocess and signal handling) to parse its own options (issue 20).
def add_agent_record_argument(parser: argparse.ArgumentParser) -> None:
    """--agent-record-hz (shared by `memsight run` and `memsight watch`)."""
    parser.add_argument(
        "--agent-record-hz",
        metavar="HZ|all",
        type=parse_agent_record_hz,
        help="agent records kept per device, on screen and in the recording (default: the newest of each "
        "--hz tick; `all`: every record the agent wrote, e.g. 10 a second)",
    )


def parse_agent_record_hz(value: str) -> float:
    """A rate within --hz's bounds, or `all` (math.inf: every record)."""
    if value.strip().lower() == "all":
        return math.inf
    try:
        return parse_refresh_hz(value, "--agent-record-hz")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """--prometheus, --vllm-url and --peer (shared by `memsight run` and `memsight watch`)."""
    parser.add_argument(
        "--prometheus",
        metavar="[HOST:]PORT",
        help="serve everything sampled as Prometheus text on http://HOST:PORT/metrics "
        "(HOST defaults to 127.0.0.1; write 0.0.0.0:PORT to listen on every interface)",
    )
    parser.add_argument(
        "--vllm-url",
        metavar="URL",
        help="scrape a vLLM server's Prometheus /metrics (e.g. http://localhost:8000) once a second: "
        "KV cache usage, running/waiting requests, preemptions, prefix cache hits",
    )
    parser.add_argument(
        "--engine-url",
        metavar="URL",
        help="scrape another engine's own endpoint once a second, found from what answers: SGLang's /metrics "
        "(token usage), llama-server's /metrics and /slots (--metrics), Ollama's /api/ps (size, size_vram)",
    )
    parser.add_argument(
        "--peer",
        metavar="URL",
        action="append",
        default=[],
        help="another machine's memsight exporter (its --prometheus HOST:PORT), shown beside this one: "
        "headroom and buckets, fetched every 2 s off the screen's thread (2 s timeout); repeatable",
    )
