"""The optional config file: refresh rate, thresholds, default plan inputs.

Looked up at $MEMSIGHT_CONFIG, else $XDG_CONFIG_HOME/memsight/config.toml, else
~/.config/memsight/config.toml. No file is fine (defaults); a file with an unknown key or a bad value is an
error naming the key (and the keys it knows), never ignored.

The keys are the command-line options' names, with the same values (KEYS below; README "Config file"):

    model = "qwen3-8b"           # plan inputs: --model --format --kv-dtype --context (--ctx) --users --tp
    format = "default"           # the checkpoint's own; or bf16, fp8, q4_k_m, ...
    kv_dtype = "auto"
    context = "32k"              # counts as on the command line: 32768, "32,768", "32k"
    users = 8
    hz = 2                       # --hz
    headroom_warn = 8            # thresholds: GiB, or a size with its unit ("1.5GiB", "512MiB")
    headroom_critical = 2
    new_process = 1
    growth = 2                   # a process growing more than this within growth_window_s (30)
    frag_fraction = 0.30         # allocator gap over this share of reserved ...
    frag = 1                     # ... and over this many GiB
    os_reserve_gib = 10          # OS reserve of this machine's unified pool (default: measured)

The same keys may sit in a [thresholds] or [plan] table, and the first format's names still work
(refresh_hz, headroom_warn_gib, growth_gib, fragmentation_gib, unified_os_reserve_gib, ...).
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass, field, replace
from typing import Any

from collectors.alert_options import AlertOptions
from planner import limits
from tui import options
from tui.options import parse_refresh_hz  # its home: every option's parser is there

GIB = 2**30


class ConfigError(ValueError):
    """A config file or option the user must fix; the message names the file and key."""


@dataclass(frozen=True, slots=True)
class PlanDefaults:
    """The plan inputs every command starts from (the same for `plan`, `watch`, `run`, `replay`, `demo`)."""

    model: str = options.DEFAULT_MODEL
    format: str | None = options.DEFAULT_FORMAT  # None: the checkpoint's own
    kv_dtype: str = options.DEFAULT_KV_DTYPE
    context: int = options.DEFAULT_CONTEXT
    users: int = options.DEFAULT_USERS
    tp: int = options.DEFAULT_TP
    # OS reserve of this machine's unified pool (or host RAM) for the Live and Plan screens; None: measured,
    # MemTotal - MemAvailable - what the memsight agents' processes hold (tui/app.py:this_machine_capacity)
    unified_os_reserve_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Config:
    refresh_hz: float = 2.0
    thresholds: AlertOptions = field(default_factory=AlertOptions)
    plan: PlanDefaults = field(default_factory=PlanDefaults)
    path: str | None = None  # where it was read from; None: built-in defaults
    explicit_plan: frozenset[str] = frozenset()  # plan fields set by a flag (resolve_config) or the file


# Every key the file takes: the command-line option's name (`--kv-dtype` is `kv_dtype`, `-` works too), at
# the top level or in its section. Values are read by the same parsers as the options (tui/options.py), so
# `context = "32k"` and `headroom_warn = "1.5GiB"` mean what they mean on the command line.
# key -> (section, field of AlertOptions / PlanDefaults / Config, parser)
KEYS: dict[str, tuple[str, str, Any]] = {
    "hz": ("", "refresh_hz", lambda v, w: parse_refresh_hz(v, w)),
    "headroom_warn": ("thresholds", "headroom_warning_bytes", options.parse_size),
    "headroom_critical": ("thresholds", "headroom_critical_bytes", options.parse_size),
    "new_process": ("thresholds", "new_process_bytes", options.parse_size),
    "growth": ("thresholds", "growth_bytes", options.parse_size),
    "growth_window_s": ("thresholds", "growth_window_s", options.parse_number),
    "frag_fraction": ("thresholds", "fragmentation_fraction", options.parse_number),
    "frag": ("thresholds", "fragmentation_min_bytes", options.parse_size),
    "model": ("plan", "model", lambda v, w: _text(v, w)),
    "format": ("plan", "format", lambda v, w: None if _text(v, w).lower() == "default" else _text(v, w)),
    "kv_dtype": ("plan", "kv_dtype", lambda v, w: _text(v, w)),
    "context": ("plan", "context", lambda v, w: options.parse_count(v, w, minimum=1)),
    "users": ("plan", "users", lambda v, w: options.parse_count(v, w, minimum=1)),
    "tp": ("plan", "tp", lambda v, w: options.parse_count(v, w, minimum=1)),
    "os_reserve_gib": ("plan", "unified_os_reserve_bytes", options.parse_size),
}
# other spellings of a key: the option's alias, and the names the file format used first
ALIASES: dict[str, str] = {
    "refresh_hz": "hz",
    "ctx": "context",
    "headroom_warn_gib": "headroom_warn",
    "headroom_critical_gib": "headroom_critical",
    "new_process_gib": "new_process",
    "growth_gib": "growth",
    "fragmentation_fraction": "frag_fraction",
    "fragmentation_gib": "frag",
    "unified_os_reserve_gib": "os_reserve_gib",
    "unified_os_reserve": "os_reserve_gib",
}
SECTIONS = ("thresholds", "plan")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a non-empty string, got {value!r}")
    return value.strip()


def default_path(env: dict[str, str] | None = None) -> pathlib.Path:
    env = dict(os.environ) if env is None else env
    if env.get("MEMSIGHT_CONFIG"):
        return pathlib.Path(env["MEMSIGHT_CONFIG"])
    base = env.get("XDG_CONFIG_HOME") or str(pathlib.Path.home() / ".config")
    return pathlib.Path(base) / "memsight" / "config.toml"


def load_config(path: str | os.PathLike[str] | None = None, *, required: bool = False) -> Config:
    """Read the config; a missing file gives the defaults unless `required` (an explicit --config)."""
    file = pathlib.Path(path) if path is not None else default_path()
    if not os.path.lexists(file):
        if required:
            raise ConfigError(f"config file {file} does not exist")
        return Config()
    if os.path.realpath(file) == os.devnull:  # --config /dev/null: the defaults, whatever file exists
        return config_from_dict({}, str(file))
    # A regular file within MAX_TOML_BYTES (--config /dev/zero, a FIFO: refused without reading), UTF-8.
    # tomllib is imported here, where a file exists: `memsight watch` with none (the usual case) draws its
    # first frame without it (issue 20)
    import tomllib  # noqa: PLC0415

    data = limits.read_regular(file, "MAX_TOML_BYTES", ConfigError, "memsight config file")
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {file} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {file} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config file {file} nests too deep to be a memsight config") from None
    except ValueError as exc:  # an integer over Python's 4300 digits (found by the fuzz suite)
        raise ConfigError(f"config file {file} is not a memsight config: {exc}"[:300]) from None
    return config_from_dict(raw, str(file))


def _key(raw_key: str, section: str, where: str) -> str:
    """The canonical key for `raw_key` found in `section` ("" = top level); a clear error otherwise."""
    key = raw_key.replace("-", "_")
    key = ALIASES.get(key, key)
    if key in KEYS and (not section or KEYS[key][0] == section):
        return key
    here = sorted(k for k, spec in KEYS.items() if not section or spec[0] == section)
    prefix = f"{section}." if section else ""
    known = ", ".join(here + ([f"[{s}]" for s in SECTIONS] if not section else []))
    import difflib  # noqa: PLC0415  (only to word this error)

    hint = difflib.get_close_matches(key, [*KEYS, *ALIASES, *SECTIONS], n=1, cutoff=0.6)
    if key in KEYS:  # a real key in the wrong table
        hint = [f"{KEYS[key][0] or 'the top level'} (it belongs there)"]
    hint_text = f"; did you mean {hint[0]}?" if hint else ""
    raise ConfigError(f"{where}: unknown key '{prefix}{raw_key}' (known: {known}){hint_text}")


def config_from_dict(raw: dict[str, Any], where: str = "config") -> Config:
    """A Config from the parsed TOML: any key of KEYS at the top level or in its section."""
    values: dict[str, tuple[str, Any]] = {}  # canonical key -> (as written, value)
    for raw_key, value in raw.items():
        if raw_key in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: [{raw_key}] must be a table")
            items = [(f"{raw_key}.{k}", _key(k, raw_key, where), v) for k, v in value.items()]
        else:
            items = [(raw_key, _key(raw_key, "", where), value)]
        for written, key, item in items:
            if key in values:
                raise ConfigError(f"{where}: {written} repeats {values[key][0]} (one value per key)")
            values[key] = (written, item)
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for key, (written, value) in values.items():
        section, name, parse = KEYS[key]
        try:
            parsed = parse(value, f"{where}: {written}")
        except options.InputError as exc:
            raise ConfigError(str(exc)) from None
        (sections[section] if section else top)[name] = parsed
    thresholds = AlertOptions(**{**_fields(AlertOptions()), **sections["thresholds"]})
    plan = PlanDefaults(**{**_fields(PlanDefaults()), **sections["plan"]})
    return Config(thresholds=thresholds, plan=plan, path=where, **top)


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}


def merge_plan_args(plan: PlanDefaults, args: Any) -> PlanDefaults:
    """The plan inputs given on the command line (the shared options of tui/options.py) over `plan`."""
    updates: dict[str, Any] = {}
    for name in ("model", "kv_dtype", "context", "users", "tp"):
        value = getattr(args, name, None)
        if value is not None:
            updates[name] = value
    if getattr(args, "os_reserve_gib", None) is not None:
        updates["unified_os_reserve_bytes"] = args.os_reserve_gib
    fmt = getattr(args, "format", None)
    if fmt is not None:
        updates["format"] = None if fmt.strip().lower() == "default" else fmt
    return replace(plan, **updates) if updates else plan
