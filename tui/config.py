"""The optional config file: refresh rate, thresholds, default plan inputs.

Looked up at $MEMSIGHT_CONFIG, else $XDG_CONFIG_HOME/memsight/config.toml, else
~/.config/memsight/config.toml. No file is fine (defaults); a file with an unknown key or a wrong type is an
error naming the key, never ignored.

    refresh_hz = 2.0
    [thresholds]
    headroom_warn_gib = 8        # headroom gauge turns yellow, and the headroom alert fires, below this
    headroom_critical_gib = 2
    new_process_gib = 1          # a new process holding more than this raises an alert
    growth_gib = 2               # a process growing more than this within growth_window_s
    growth_window_s = 30
    fragmentation_fraction = 0.30  # allocator gap over this share of reserved ...
    fragmentation_gib = 1          # ... and over this many GiB
    [plan]
    model = "llama-3.1-8b"
    format = "bf16"              # or "default" for the checkpoint's own
    kv_dtype = "auto"
    context = 8192
    users = 8
    tp = 1
    unified_os_reserve_gib = 10  # what the plan keeps for the OS on a unified pool (the lesson's assumption)
"""

from __future__ import annotations

import math
import os
import pathlib
import tomllib
from dataclasses import dataclass, field
from typing import Any

from collectors.alerts import AlertOptions
from planner import limits

GIB = 2**30


class ConfigError(ValueError):
    """A config file or option the user must fix; the message names the file and key."""


@dataclass(frozen=True, slots=True)
class PlanDefaults:
    model: str = "llama-3.1-8b"
    format: str | None = "bf16"
    kv_dtype: str = "auto"
    context: int = 8192
    users: int = 8
    tp: int = 1
    unified_os_reserve_bytes: int = 10 * GIB


@dataclass(frozen=True, slots=True)
class Config:
    refresh_hz: float = 2.0
    thresholds: AlertOptions = field(default_factory=AlertOptions)
    plan: PlanDefaults = field(default_factory=PlanDefaults)
    path: str | None = None  # where it was read from; None: built-in defaults


# key -> (AlertOptions field, multiplier to its unit)
THRESHOLD_KEYS: dict[str, tuple[str, float]] = {
    "headroom_warn_gib": ("headroom_warning_bytes", GIB),
    "headroom_critical_gib": ("headroom_critical_bytes", GIB),
    "new_process_gib": ("new_process_bytes", GIB),
    "growth_gib": ("growth_bytes", GIB),
    "growth_window_s": ("growth_window_s", 1.0),
    "fragmentation_fraction": ("fragmentation_fraction", 1.0),
    "fragmentation_gib": ("fragmentation_min_bytes", GIB),
}
PLAN_KEYS: dict[str, type] = {
    "model": str,
    "format": str,
    "kv_dtype": str,
    "context": int,
    "users": int,
    "tp": int,
}


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
    # A regular file within MAX_TOML_BYTES (--config /dev/zero, a FIFO: refused without reading), UTF-8.
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
    return config_from_dict(raw, str(file))


def check_number(where: str, value: Any, *, positive: bool = False) -> float:
    """A setting: a finite number, not negative (positive if asked), at most MAX_SETTING; ConfigError naming
    `where` otherwise. Shared by the config file and the command-line options."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a number, got {value!r}"[:200])
    if not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{where} must {'be positive' if positive else 'not be negative'}, got {value!r}")
    if value > limits.MAX_SETTING:
        raise ConfigError(f"{where} is {value:.4g}, over {limits.bound('MAX_SETTING')}")
    return float(value)


def check_refresh_hz(where: str, value: Any) -> float:
    """A refresh rate within [MIN_REFRESH_HZ, MAX_REFRESH_HZ] (inf once killed the sampling thread)."""
    hz = check_number(where, value, positive=True)
    if not limits.MIN_REFRESH_HZ <= hz <= limits.MAX_REFRESH_HZ:
        raise ConfigError(
            f"{where} is {hz:g}, outside {limits.bound('MIN_REFRESH_HZ')} .. {limits.bound('MAX_REFRESH_HZ')}"
        )
    return hz


def _number(where: str, value: Any) -> float:
    return check_number(where, value)


def config_from_dict(raw: dict[str, Any], where: str = "config") -> Config:
    known = {"refresh_hz", "thresholds", "plan"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(known))})")
    refresh_hz = check_refresh_hz(f"{where}: refresh_hz", raw.get("refresh_hz", 2.0))
    thresholds = AlertOptions()
    section = raw.get("thresholds", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: [thresholds] must be a table")
    updates: dict[str, Any] = {}
    for key, value in section.items():
        if key not in THRESHOLD_KEYS:
            raise ConfigError(f"{where}: unknown key thresholds.{key} (known: {', '.join(THRESHOLD_KEYS)})")
        name, unit = THRESHOLD_KEYS[key]
        number = _number(f"{where}: thresholds.{key}", value) * unit
        updates[name] = int(number) if name.endswith("_bytes") else number
    if updates:
        thresholds = AlertOptions(**{**_fields(thresholds), **updates})
    plan = PlanDefaults()
    section = raw.get("plan", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: [plan] must be a table")
    plan_updates: dict[str, Any] = {}
    for key, value in section.items():
        if key == "unified_os_reserve_gib":
            plan_updates["unified_os_reserve_bytes"] = int(_number(f"{where}: plan.{key}", value) * GIB)
            continue
        if key not in PLAN_KEYS:
            raise ConfigError(
                f"{where}: unknown key plan.{key} (known: {', '.join(PLAN_KEYS)}, unified_os_reserve_gib)"
            )
        kind = PLAN_KEYS[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigError(f"{where}: plan.{key} must be {kind.__name__}, got {value!r}")
        if kind is int and value < 1:
            raise ConfigError(f"{where}: plan.{key} must be at least 1, got {value}")
        plan_updates[key] = None if key == "format" and value == "default" else value
    if plan_updates:
        plan = PlanDefaults(**{**_fields(plan), **plan_updates})
    return Config(refresh_hz=refresh_hz, thresholds=thresholds, plan=plan, path=where)


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}
