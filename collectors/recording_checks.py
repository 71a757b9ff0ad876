"""What each event kind must hold for the readers (os_snapshot_from, summarize, ReplayMonitor...) to use it,
with the types of the snapshot fields they become (collectors/snapshots.py: `int | None` is "num?").
Kinds: "num" a finite number within MAX_MEASURED (not a bool), "time" one within [0, MAX_TIMESTAMP],
"int" an integer within MAX_MEASURED, "str", "bool"; a trailing "?" allows null (a missing "?" field is
null); "list-" a list when present (the readers iterate `event.get(name, [])`, so null is refused).
Fields not listed are not read, so not checked (newer recordings may add some).

The fast reader (collectors/recording_fast.py) checks its lines with the same tables.
"""

from __future__ import annotations

from collectors import agent_format as fmt
from collectors.recording_format import (
    recorded_record_fields,
)
from planner import limits  # a stdlib-only leaf: the limits every reader shares

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: replay --json does not pay for it
if TYPE_CHECKING:
    from typing import Any

_HEADER_FIELDS = {"created": "time?", "host": "str?", "hz": "num?"}
_OS_FIELDS = {
    "t": "time", "mem_total": "num", "mem_available": "num", "cached": "num?", "shmem": "num?",
    "swap_total": "num", "swap_free": "num", "psi_some_avg10": "num?", "psi_full_avg10": "num?",
    "oom_kill": "num?", "skipped": "int?", "source": "str?", "procs": "list-", "w": "num?",
    "mem_free": "num?", "buffers": "num?", "anon_pages": "num?", "sreclaimable": "num?", "kernel": "num?",
}  # fmt: skip
_PROC_ROW = ("int", "int", "str", "num", "num?", "any", "str")  # pid, start, name, rss, growth, is_new, user
_PROC_FIELDS = {"pid": "int", "start": "int", "cmdline": "str?"}
_NVML_FIELDS = {"t": "time", "status": "str", "available": "bool", "driver": "str?", "devices": "list-"}
_DEVICE_FIELDS = {
    "index": "int", "name": "str", "uuid": "str", "total": "num?", "reserved": "num?", "used": "num?",
    "free": "num?", "unified": "bool", "utilization_gpu": "num?", "processes": "list-",
    "unsupported": "list-", "errors": "list-",
}  # fmt: skip
_GPU_PROCESS_FIELDS = {"pid": "int", "used_bytes": "num?", "kind": "str"}
_VLLM_FIELDS = {
    "t": "time", "url": "str?", "status": "str", "available": "bool", "models": "list-",
    "num_gpu_blocks": "int?", "block_size": "int?", "gpu_memory_utilization": "num?", "samples": "int?",
    "refused": "list-",
}  # fmt: skip
_VLLM_MODEL_FIELDS = {
    "model_name": "str", "engine": "str?", "kv_cache_usage": "num?", "kv_cache_metric": "str?",
    "requests_running": "int?", "requests_waiting": "int?", "requests_swapped": "int?",
    "preemptions_total": "int?", "prefix_cache_hits": "int?", "prefix_cache_queries": "int?",
    "prefix_cache_metrics": "list-", "gpu_prefix_cache_hit_rate": "num?", "cpu_cache_usage": "num?",
}  # fmt: skip
_ENGINE_FIELDS = {
    "t": "time", "url": "str?", "kind": "str?", "status": "str?", "available": "bool?", "kv_usage": "num?",
    "kv_tokens_used": "int?", "kv_tokens_total": "int?", "running": "int?", "waiting": "int?",
    "loads": "list-", "slots": "list-",
}  # fmt: skip
_ENGINE_LOAD_FIELDS = {"name": "str?", "size": "num?", "size_vram": "num?", "context_length": "int?"}
_ENGINE_LOG_FIELDS = {"t": "time", "engine": "str", "stage": "str?", "devices": "list-", "ranks": "int?"}
_ENGINE_DEVICE_FIELDS = {
    "device": "str", "weights": "num?", "kv": "num?", "activations": "num?", "overhead": "num?",
}  # fmt: skip
_SKIP_FIELDS = {"t": "time", "source": "str", "path": "str", "reason": "str"}
_AGENT_META_FIELDS = {"pid": "int", "start": "int", "cmdline": "str?", "path": "str?", "hz": "num?"}
_AGENT_FIELDS = {
    "pid": "int", "start": "int", "status": "str?", "alive": "bool?", "lost": "int?", "r": "list",
    "sr": "num?",
}  # fmt: skip
_AGENT_V2_FIELDS = {"pid": "int", "start": "int", "t": "time", "dev": "int"}


_MEASURED = float(limits.MAX_MEASURED)
_LATEST = float(limits.MAX_TIMESTAMP)
_CHARS = limits.MAX_STRING_CHARS
# One test per kind, each a single call (a recording's checks run a few hundred thousand times an hour).
_KINDS = {
    "any": lambda v: True,
    "str": lambda v: type(v) is str and len(v) <= _CHARS,
    "bool": lambda v: type(v) is bool,
    "list": lambda v: type(v) is list,
    "int": lambda v: type(v) is int and -_MEASURED <= v <= _MEASURED,
    "time": lambda v: (type(v) is float or type(v) is int) and 0.0 <= v <= _LATEST,
    "num": lambda v: (type(v) is float or type(v) is int) and -_MEASURED <= v <= _MEASURED,
    "any?": lambda v: True,
    "str?": lambda v: v is None or (type(v) is str and len(v) <= _CHARS),
    "bool?": lambda v: v is None or type(v) is bool,
    "list?": lambda v: v is None or type(v) is list,
    "int?": lambda v: v is None or (type(v) is int and -_MEASURED <= v <= _MEASURED),
    "time?": lambda v: v is None or ((type(v) is float or type(v) is int) and 0.0 <= v <= _LATEST),
    "num?": lambda v: v is None or ((type(v) is float or type(v) is int) and -_MEASURED <= v <= _MEASURED),
}  # a NaN fails the comparisons; JSON gives exact int and float, never a subclass


def _fits(value: Any, kind: str) -> bool:
    return _KINDS[kind](value)


def _check_fields(obj: Any, fields: dict[str, str], where: str = "") -> None:
    if not isinstance(obj, dict):
        raise ValueError(f"{where or 'event'} is not an object")
    get = obj.get
    for name, kind in fields.items():
        if kind == "list-":
            if not isinstance(get(name, []), list):
                raise ValueError(f"{where}{name} is {repr(obj[name])[:60]}, expected a list")
            continue
        value = get(name)
        if not _KINDS[kind](value):
            shown = repr(value)[:60] if name in obj else "missing"
            raise ValueError(f"{where}{name} is {shown}, expected {kind.rstrip('?')}")


def _check_list(items: list, fields: dict[str, str], names: tuple[frozenset, frozenset], where: str) -> None:
    """Each item becomes a snapshot class's instance (cls(**item)): its fields checked, none unknown, every
    one it must hold given. `names`: (the fields it may hold, those it must), _item_names'."""
    allowed, required = names
    for item in items:
        _check_fields(item, fields, where)
        extra = set(item) - allowed
        if extra:
            raise ValueError(f"{where}has unknown field {sorted(extra)[0]!r}")
        missing = required - set(item)
        if missing:
            raise ValueError(f"{where}{sorted(missing)[0]} is missing")


def _item_names(fields: dict[str, str], defaulted: frozenset[str]) -> tuple[frozenset[str], frozenset[str]]:
    """(the fields an item may hold, those it must): those with a default in its class (`defaulted`) and the
    "list-" ones (the converters fill them in) may be left out."""
    required = frozenset(n for n, kind in fields.items() if kind != "list-" and n not in defaulted)
    return frozenset(fields), required


# The lists whose items become snapshot classes: an nvml line's devices (DeviceInfo) and their processes
# (GpuProcess), a vllm line's models (VLLMModelStats). Their fields are written out above rather than read
# from the classes, so that reading a recording never loads collectors/snapshots.py (`memsight replay
# --json`, issue 20); tests/collectors/test_recording_checks.py holds them equal to the classes' fields and
# defaults.
_DEVICE_NAMES = _item_names(_DEVICE_FIELDS, frozenset({"errors"}))
_GPU_PROCESS_NAMES = _item_names(_GPU_PROCESS_FIELDS, frozenset())
_VLLM_MODEL_NAMES = _item_names(
    _VLLM_MODEL_FIELDS, frozenset({"prefix_cache_metrics", "gpu_prefix_cache_hit_rate", "cpu_cache_usage"})
)


def _check_strings(items: list | None, where: str) -> None:
    if items and not all(isinstance(x, str) and len(x) <= limits.MAX_STRING_CHARS for x in items):
        raise ValueError(f"{where} must be a list of strings")


def _check_row(row: Any) -> None:
    if not isinstance(row, list) or not 7 <= len(row) <= 8:
        raise ValueError("os event: a process row is not a list of 7 or 8 values")
    for value, (test, kind) in zip(row, _PROC_ROW_TESTS, strict=False):
        if not test(value):
            raise ValueError(f"os event: process row value {repr(value)[:60]}, expected {kind}")


_PROC_ROW_TESTS = tuple((_KINDS[kind], kind) for kind in (*_PROC_ROW, "num"))  # the 8th: its own window


def check_event(e: dict) -> None:
    """ValueError (one line) unless event `e` holds what the readers use, with the types they expect."""
    k = e["k"]
    if not _fits(e.get("t"), "time?"):  # every kind: replay orders events by it (alert, summary, ...)
        raise ValueError(f"{k[:20]} event: t is {repr(e['t'])[:60]}, expected time")
    if k == "os":
        _check_fields(e, _OS_FIELDS, "os event: ")
        for row in e.get("procs") or ():
            _check_row(row)
    elif k == "proc":
        _check_fields(e, _PROC_FIELDS, "proc event: ")
    elif k == "nvml":
        _check_fields(e, _NVML_FIELDS, "nvml event: ")
        devices = e.get("devices") or []
        _check_list(devices, _DEVICE_FIELDS, _DEVICE_NAMES, "nvml device: ")
        for d in devices:
            _check_list(d.get("processes") or [], _GPU_PROCESS_FIELDS, _GPU_PROCESS_NAMES, "nvml process: ")
            _check_strings(d.get("unsupported"), "nvml device: unsupported")
            _check_strings(d.get("errors"), "nvml device: errors")
    elif k == "vllm":
        _check_fields(e, _VLLM_FIELDS, "vllm event: ")
        _check_strings(e.get("refused"), "vllm event: refused")
        models = e.get("models") or []
        _check_list(models, _VLLM_MODEL_FIELDS, _VLLM_MODEL_NAMES, "vllm model: ")
        for m in models:
            _check_strings(m.get("prefix_cache_metrics"), "vllm model: prefix_cache_metrics")
    elif k == "pool":
        from collectors.pool import check_pool_event  # noqa: PLC0415

        _check_fields(e, {"t": "time"}, "pool event: ")
        check_pool_event(e)
    elif k == "engine":
        _check_fields(e, _ENGINE_FIELDS, "engine event: ")
        for load in e.get("loads") or []:
            _check_fields(load, _ENGINE_LOAD_FIELDS, "engine load: ")
        for slot in e.get("slots") or []:
            _check_fields(slot, {}, "engine slot: ")
    elif k == "engine_log":
        _check_fields(e, _ENGINE_LOG_FIELDS, "engine_log event: ")
        for device in e.get("devices") or []:
            _check_fields(device, _ENGINE_DEVICE_FIELDS, "engine_log device: ")
        figures = e.get("figures", {})
        if not isinstance(figures, dict) or not all(_fits(v, "num?") for v in figures.values()):
            raise ValueError("engine_log event: figures must map names to numbers")
    elif k == "agent_meta":
        _check_fields(e, _AGENT_META_FIELDS, "agent_meta event: ")
    elif k == "skip":
        _check_fields(e, _SKIP_FIELDS, "skip event: ")
    elif k == "scope":
        own = e.get("own")
        if not isinstance(own, list) or not all(_fits(p, "int") for p in own):
            raise ValueError("scope event: own must be a list of pids")
    elif k == "agent":
        _check_fields(e, _AGENT_FIELDS, "agent event: ")
        r = e["r"]
        if len(r) != len(fmt.RECORD_FIELDS) + 1 or not all(_fits(v, "num?") for v in r[:-1]):
            raise ValueError(f"agent event: r must hold {len(fmt.RECORD_FIELDS)} numbers and a label")
        if not _fits(r[-1], "str"):
            raise ValueError("agent event: the record's label is not a string")
        recorded_record_fields(r)  # CollectorError (a ValueError) for out-of-range times and devices
