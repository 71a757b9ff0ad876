"""The plan follows what the agents loaded (collectors/agent_info.py): the plan inputs each agent's process
implies (PlanSource, plan_sources: its loaded model, dtype and cache, the flags and config file winning), and
the notes the Live screen's bucket comparison shows under an agent's bars: its prefill/decode phase peaks
(phase_line), its measured weights against the planned ones (weights_check) and its status (agent_notes).

Pure: the same state always gives the same values (no clock, no hostname, no /proc).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

from collectors.snapshots import MonitorState
from planner.budget import PlanInputs
from tui.widgets.fmt import size

# --- the plan follows what the agents loaded (collectors/agent_info.py) ------------------------------
# torch dtype of a loaded model -> the planner's weight format
DTYPE_FORMATS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True, slots=True)
class PlanSource:
    """The plan inputs one agent's process implies: its loaded model (config, dtype) and its cache (batch,
    tokens), under the flags and config file, which win where given. `spec` is None when the process
    published no model (or one the planner cannot read: `error`)."""

    pid: int
    inputs: PlanInputs
    spec: Any  # planner.ModelSpec | None
    spec_key: str  # identifies the published config (memo key)
    provenance: tuple[str, ...]  # "model: from pid 4121's loaded model (...)", "context: from its cache, ..."
    error: str = ""


def _largest_model(info):
    with_config = [m for m in info.models if m.config is not None]
    if not with_config:
        return None
    return max(with_config, key=lambda m: sum(m.params_bytes.values()) + sum(m.buffers_bytes.values()))


def _cache_for_plan(info):
    live = [c for c in info.caches if c.tokens and c.batch]
    if live:
        return max(live, key=lambda c: c.total_bytes), "its cache"
    largest = info.largest_cache
    if largest is not None and largest.tokens and largest.batch:
        return largest, "its largest cache so far"
    return None, ""


def plan_sources(state: MonitorState, base: PlanInputs, explicit: frozenset[str]) -> tuple[PlanSource, ...]:
    """One PlanSource per agent that published a loaded model (pid order). Fields named in `explicit` (given
    as flags or in the config file) keep `base`'s value and say so."""
    out = []
    for view in state.agents:
        info = view.info
        model = _largest_model(info) if info is not None else None
        if model is None:
            unreadable = [m for m in info.models if m.config_error] if info is not None else []
            if unreadable and "model" not in explicit:  # said where the plan would be, not planned silently
                m = unreadable[0]
                why = f"pid {view.pid}'s loaded {m.cls}: {m.config_error}; give --model to plan it"
                out.append(PlanSource(view.pid, base, None, "", (), why))
            continue
        out.append(_plan_source(view.pid, info, model, base, explicit))
    return tuple(out)


def _plan_source(pid: int, info, model, base: PlanInputs, explicit: frozenset[str]) -> PlanSource:
    """The plan inputs of pid `pid`'s loaded `model` (its largest) and its cache; `explicit` fields kept."""
    notes: list[str] = []
    fields: dict[str, Any] = {}
    key = json.dumps(dict(model.config), sort_keys=True, default=str)
    spec, error = _loaded_spec(pid, model, base, explicit, fields, notes)
    cache = _cache_fields(info, base, explicit, fields, notes)
    if "format" not in explicit and spec is not None:
        fmt_name = _loaded_format(model, spec)
        if fmt_name is not None:
            fields["format"] = fmt_name
            notes.append(f"{fmt_name} as loaded")
    kv_loaded = DTYPE_FORMATS.get(model.dtype or "")
    quantized_cache = cache is not None and "Quantized" in cache.cls
    if "kv_dtype" not in explicit and spec is not None and kv_loaded and not quantized_cache:
        # the cache holds keys and values in the dtype the model computes in (a config saying bfloat16
        # built in float32 keeps a float32 cache), not the config's torch_dtype KV "auto" reads
        fields["kv_dtype"] = kv_loaded
        notes.append(f"KV {kv_loaded} as loaded")
    if spec is not None:  # the other models it loaded (a draft beside its target): their weights too
        extra, said = _other_models_weights(info, model)
        fields["extra_weight_bytes"] = extra
        notes.extend(said)
    return PlanSource(pid, replace(base, **fields), spec, key if spec else "", tuple(notes), error)


def _loaded_spec(
    pid: int, model, base: PlanInputs, explicit: frozenset[str], fields: dict[str, Any], notes: list[str]
) -> tuple[Any, str]:
    """(the planner's spec of the loaded model, why there is none): None while --model names another one,
    or when the planner cannot read its config (the error)."""
    from planner import load_spec  # noqa: PLC0415  (stdlib-only planner; loaded when a model is published)

    if "model" in explicit:
        notes.append(f"model: {base.model} (given; pid {pid} loaded a {model.cls})")
        return None, ""
    try:
        spec = load_spec(dict(model.config))
    except ValueError as exc:  # PlannerError: shown, never a crash
        return None, f"pid {pid}'s loaded {model.cls}: {exc}"
    spec = replace(spec, name=f"pid {pid}'s {model.cls}")
    fields["model"] = f"pid {pid}: {model.cls}"
    notes.append(f"model: from pid {pid}'s loaded model")
    return spec, ""


def _cache_fields(info, base: PlanInputs, explicit: frozenset[str], fields: dict[str, Any], notes: list[str]):
    """The context and users from the process's cache (`fields`, said in `notes`); the cache, or None."""
    cache, where = _cache_for_plan(info)
    if cache is not None:
        if "context" not in explicit:
            # the sequence's length, not a sliding window's (the planner holds the window itself)
            seen = max(cache.seq_tokens or 0, cache.tokens or 0)
            fields["context"], fields["output_tokens"] = seen, 0
            window = f" ({cache.tokens:,} held: a sliding window)" if seen > (cache.tokens or 0) else ""
            notes.append(f"context: from {where}, {seen:,} tokens{window}")
        if "users" not in explicit:
            fields["users"] = cache.batch
            notes.append(f"batch {cache.batch}")
    elif "context" not in explicit:
        notes.append(f"context: no cache seen yet, {base.context:,} tokens (default)")
    return cache


def _loaded_format(model, spec) -> str | None:
    """The planner's weight format of a model as loaded: its checkpoint's quantization, else its dtype."""
    if model.config.get("quantization_config") is not None:
        return spec.default_format
    return DTYPE_FORMATS.get(model.dtype or "")


def _other_models_weights(info, target) -> tuple[int, list[str]]:
    """(planned weight bytes of every model but `target` the process loaded, one note each): each planned
    from its own config and format as loaded, as the target is."""
    from planner import load_spec, weight_bytes  # noqa: PLC0415  (stdlib-only planner)

    total, notes = 0, []
    for other in info.models:
        if other is target or other.config is None:
            continue
        try:
            spec = load_spec(dict(other.config))
            planned = weight_bytes(spec, _loaded_format(other, spec)).total
        except ValueError as exc:  # PlannerError: said, never a crash; the weights check shows the difference
            notes.append(f"+ a {other.cls} (its weights not planned: {exc})")
            continue
        total += planned
        notes.append(f"+ a {other.cls} ({size(planned)} of weights planned)")
    return total, notes


def phase_line(info) -> str:
    """"activations: prefill peak 3.10 GiB at 12:03:41 UTC, decode peak 205 MiB at ..." from the agent's
    phases; a phase none of whose calls rose above an earlier high says so (a 0 would read as measured)."""
    parts = []
    for name in ("prefill", "decode"):
        p = info.phase(name)
        if p is None or p.calls == 0:
            continue
        if not p.peak_bytes:  # None: no call set a new high; 0: a new high, but not above the call's entry
            parts.append(f"{name}: no call set a new high above its entry level ({p.calls:,} calls)")
            continue
        when = time.strftime("%H:%M:%S", time.gmtime(p.peak_t)) if p.peak_t else "?"
        text = f"{name} peak {size(p.peak_bytes)} at {when}"
        if p.unresolved_calls:
            text += f" ({p.calls - p.unresolved_calls:,}/{p.calls:,} calls seen)"
        parts.append(text)
    if not parts:
        return ""
    where = "RSS high-water mark" if "ru_maxrss" in info.phase_counter else "allocator peak"
    return "activations: " + ", ".join(parts) + f" (UTC; {where}, never reset)"


def weights_check(info, planned_weight_bytes: int, device: int) -> str:
    """The tracked weights on `device` (-1: host) against the planner's bytes for the same config and format:
    equal up to the model's buffers (rotary tables...) is the boring, expected case; otherwise the likely
    cause."""
    model = _largest_model(info)
    if model is None:
        return ""
    # every tracked model, as the weights bucket counts them (a draft beside its target: the plan counts
    # both, plan_sources' extra_weight_bytes)
    models = info.models
    params = sum(m.params_bytes.get(device, 0) for m in models)
    buffers = sum(m.buffers_bytes.get(device, 0) for m in models)
    measured = params + buffers
    elsewhere = sum(v for m in models for d, v in m.params_bytes.items() if d != device)
    diff = params - planned_weight_bytes
    which = f"{len(models)} models ({' + '.join(m.cls for m in models)}), " if len(models) > 1 else ""
    if diff == 0:
        planned = size(planned_weight_bytes)
        return f"weights: {which}measured = planned {planned} + buffers {size(buffers)}: as planned"
    head = f"weights: {which}measured {size(measured)} (params {size(params)} + buffers {size(buffers)})"
    cause = "cause unknown"
    config = model.config or {}
    embed = config.get("vocab_size", 0) * config.get("hidden_size", 0)
    if elsewhere and diff < 0:
        cause = f"{size(elsewhere)} of weights kept off this device (device_map offload?)"
    elif planned_weight_bytes and params == 2 * planned_weight_bytes:
        cause = "twice the plan: weights duplicated (a second copy, or a model loaded twice)"
    elif embed and config.get("tie_word_embeddings") and diff > 0 and diff % embed == 0:
        cause = "tied embeddings untied (a separate head copy)"
    elif diff > 0:
        cause = "more than planned: a tensor upcast (e.g. kept in fp32), or a format other than planned"
    else:
        cause = "less than planned: part of the model elsewhere, or a format other than planned"
    return f"{head} vs planned {size(planned_weight_bytes)}: {diff:+,} B, {cause}"


def agent_notes(info) -> tuple[str, ...]:
    """Status worth a line: the agent's problems (a failed last sample, tracking lost at a fork), failed
    hooks, untracked caches (named once), autotrack off or failed."""
    if info is None:
        return ()
    notes = [f"agent: {p}" for p in info.problems]
    notes += [f"autotrack hook {h}" for h in info.failed_hooks]
    notes += [f"untracked: {u}" for u in info.untracked]
    if info.autotrack.startswith(("off", "failed")):
        notes.append(f"autotrack {info.autotrack}")
    return tuple(notes)
