"""The agent's info file (beside its ring file): reading, validating, and the values the monitor keeps.

The agent (collectors/agent.py Agent.info) rewrites `agent-<pid>-<start>.info.json` atomically when what it
knows besides the per-tick numbers changes: the models it tracks (class, dtype, config.json content or why it
could not be read, parameter and buffer bytes per device), its caches (class, batch, token slots per layer,
bytes per device), the largest cache it has seen, the prefill/decode activation peaks, the automatic-tracking
hooks' status and the problems that would otherwise read as "no data". The monitor
re-reads the file when its size or mtime changed; the recorder keeps each new version (kind "agent_info") so
a replay shows the same. A file that is too large, not JSON or not shaped as below is refused with a
CollectorError naming it (the monitor keeps the last good one and reports the reason).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from collectors import agent_format as fmt
from collectors.errors import CollectorError


@dataclass(frozen=True, slots=True)
class TrackedModel:
    cls: str  # "LlamaForCausalLM"
    name: str  # name_or_path ("" for a model built from a config)
    dtype: str | None  # "float32", "bfloat16", ...
    config: Mapping[str, Any] | None  # config.json content (model.config.to_dict()); None: a plain module
    auto: bool  # tracked automatically (False: the script called agent.track_model too)
    params_bytes: Mapping[int, int]  # per device (-1: not on a CUDA device)
    buffers_bytes: Mapping[int, int]
    config_error: str = ""  # why `config` is None for a model that has one ("config.to_dict() failed: ...")

    def weights_on(self, device: int) -> int:
        return self.params_bytes.get(device, 0) + self.buffers_bytes.get(device, 0)


@dataclass(frozen=True, slots=True)
class TrackedCache:
    cls: str  # "DynamicCache"
    auto: bool
    structure: str  # "layers" | "key_cache" | "tensors"
    batch: int | None
    tokens: int | None  # token slots held (the longest layer; a static cache: its allocated length)
    layer_tokens: tuple[int, ...]  # token slots of each filled layer (one not filled yet: absent)
    bytes: Mapping[int, int]  # per device
    layers: int = 0  # layers the cache has (0: structure unknown)
    # the sequence length its layers have seen: above `tokens` where a sliding window holds only its last
    # tokens (None: an agent that did not say; then `tokens`)
    seq_tokens: int | None = None

    @property
    def settled(self) -> bool:
        """Every layer holds the same number of tokens: not read between two layers' updates of one step."""
        return self.layers > 0 and len(self.layer_tokens) == self.layers and len(set(self.layer_tokens)) == 1

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())


@dataclass(frozen=True, slots=True)
class PhasePeak:
    """Activation peak of one phase: the largest new high of the process's peak counter set inside a forward
    call of that phase, above the call's entry level. Calls that stayed under an earlier high are counted in
    `unresolved_calls` (their own peak is unknown: the counter is never reset)."""

    phase: str  # "prefill" | "decode"
    calls: int
    last_tokens: int  # batch x new tokens of the last call
    peak_bytes: int | None
    peak_t: float | None
    unresolved_calls: int


@dataclass(frozen=True, slots=True)
class AgentInfo:
    t: float
    autotrack: str  # "on" | "off (MEMSIGHT_AUTOTRACK=0)" | ...
    hooks: Mapping[str, str]  # "models" / "caches" / "phases" -> "ok" | "waiting: ..." | "failed: ..."
    versions: Mapping[str, str]  # {"transformers": "5.24.0"}
    hook_errors: int
    hook_last_error: str
    models: tuple[TrackedModel, ...]
    caches: tuple[TrackedCache, ...]
    largest_cache: TrackedCache | None  # the cache holding the most bytes seen so far (alive or not)
    phases: tuple[PhasePeak, ...]
    phase_counter: str  # what the phase figures are measured with
    untracked: tuple[str, ...]  # "MyCache, unknown structure"
    # what went wrong that would otherwise read as "no data": "the last sample at stop failed: ...",
    # "automatic tracking not restored after the fork: ..." (Agent.note_problem)
    problems: tuple[str, ...] = ()

    def phase(self, name: str) -> PhasePeak | None:
        for p in self.phases:
            if p.phase == name:
                return p
        return None

    @property
    def failed_hooks(self) -> tuple[str, ...]:
        return tuple(f"{k}: {v}" for k, v in self.hooks.items() if v.startswith("failed"))


def _int(value: Any, what: str, *, none: bool = True) -> int | None:
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} is {value!r}, not a byte/token count")
    return value


def _str(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{what} is {type(value).__name__}, not text")
    return value[:300]


def _by_device(value: Any, what: str) -> Mapping[int, int]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a mapping of device to bytes")
    out = {}
    for k, v in value.items():
        try:
            device = int(k)
        except (TypeError, ValueError):
            raise ValueError(f"{what}: device {k!r} is not a number") from None
        out[device] = _int(v, f"{what}[{k}]", none=False)
    return MappingProxyType(out)


def _cache(raw: Any) -> TrackedCache:
    if not isinstance(raw, dict):
        raise ValueError("a cache entry is not an object")
    layer_tokens = raw.get("layer_tokens") or []
    if not isinstance(layer_tokens, list):
        raise ValueError("cache layer_tokens is not a list")
    return TrackedCache(
        cls=_str(raw.get("class"), "cache class"),
        auto=bool(raw.get("auto")),
        structure=_str(raw.get("structure"), "cache structure"),
        batch=_int(raw.get("batch"), "cache batch"),
        tokens=_int(raw.get("tokens"), "cache tokens"),
        layer_tokens=tuple(_int(x, "cache layer tokens", none=False) for x in layer_tokens[:4096]),
        bytes=_by_device(raw.get("bytes", {}), "cache bytes"),
        layers=_int(raw.get("layers", 0), "cache layers", none=False),
        seq_tokens=_int(raw.get("seq_tokens"), "cache sequence tokens"),
    )


def _model(m: Any) -> TrackedModel:
    if not isinstance(m, dict):
        raise ValueError("a model entry is not an object")
    config = m.get("config")
    if config is not None and not isinstance(config, dict):
        raise ValueError("model config is not an object")
    return TrackedModel(
        cls=_str(m.get("class"), "model class"),
        name=_str(m.get("name"), "model name"),
        dtype=_str(m.get("dtype"), "model dtype") or None,
        config=None if config is None else MappingProxyType(config),
        auto=bool(m.get("auto")),
        params_bytes=_by_device(m.get("params_bytes", {}), "params_bytes"),
        buffers_bytes=_by_device(m.get("buffers_bytes", {}), "buffers_bytes"),
        config_error=_str(m.get("config_error"), "model config error"),
    )


def _phases(raw_phases: Any) -> list[PhasePeak]:
    if not isinstance(raw_phases, dict):
        raise ValueError("phases is not an object")
    phases = []
    for name, p in raw_phases.items():
        if not isinstance(p, dict):
            raise ValueError(f"phase {name!r} is not an object")
        peak_t = p.get("peak_t")
        phases.append(
            PhasePeak(
                phase=_str(name, "phase name"),
                calls=_int(p.get("calls", 0), "phase calls", none=False),
                last_tokens=_int(p.get("last_tokens", 0), "phase tokens", none=False),
                peak_bytes=_int(p.get("peak_bytes"), "phase peak"),
                peak_t=float(peak_t) if isinstance(peak_t, (int, float)) else None,
                unresolved_calls=_int(p.get("unresolved_calls", 0), "unresolved calls", none=False),
            )
        )
    return phases


def parse_info(raw: Any, where: str = "agent info") -> AgentInfo:
    """The info document (a parsed JSON object) -> AgentInfo; CollectorError naming `where` if malformed."""
    try:
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        if raw.get("version") != fmt.INFO_VERSION:
            raise ValueError(f"version {raw.get('version')!r}, this memsight reads {fmt.INFO_VERSION}")
        models = [_model(m) for m in raw.get("models") or []]
        phases = _phases(raw.get("phases") or {})
        hooks = raw.get("hooks") or {}
        versions = raw.get("versions") or {}
        untracked = raw.get("untracked") or []
        problems = raw.get("problems") or []
        if not all(isinstance(x, dict) for x in (hooks, versions)) or not all(
            isinstance(x, list) for x in (untracked, problems)
        ):
            raise ValueError("hooks / versions / untracked / problems of the wrong type")
        largest = raw.get("largest_cache")
        t = raw.get("t", 0.0)
        return AgentInfo(
            t=float(t) if isinstance(t, (int, float)) else 0.0,
            autotrack=_str(raw.get("autotrack"), "autotrack"),
            hooks=MappingProxyType({_str(k, "hook"): _str(v, "hook status") for k, v in hooks.items()}),
            versions=MappingProxyType({_str(k, "package"): _str(v, "version") for k, v in versions.items()}),
            hook_errors=_int(raw.get("hook_errors", 0), "hook errors", none=False),
            hook_last_error=_str(raw.get("hook_last_error"), "hook error"),
            models=tuple(models),
            caches=tuple(_cache(c) for c in raw.get("caches") or []),
            largest_cache=None if largest is None else _cache(largest),
            phases=tuple(phases),
            phase_counter=_str(raw.get("phase_counter"), "phase counter"),
            untracked=tuple(_str(u, "untracked") for u in untracked[:50]),
            problems=tuple(_str(x, "problem") for x in problems[:20]),
        )
    except ValueError as exc:
        raise CollectorError(f"{where}: malformed agent info: {exc}") from None


class InfoFile:
    """One agent's info file, re-read only when it changed (size or mtime)."""

    def __init__(self, ring_path: str) -> None:
        self.path = fmt.info_file_path(ring_path)
        self._key: tuple[int, int] | None = None

    def read_if_changed(self) -> tuple[dict, AgentInfo] | None:
        """(raw document, parsed) when the file is new or changed since the last call; None when unchanged or
        absent; CollectorError when it is unreadable or malformed."""
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        key = (info.st_size, info.st_mtime_ns)
        if key == self._key:
            return None
        if info.st_size > fmt.INFO_MAX_BYTES:
            self._key = key
            raise CollectorError(
                f"{self.path}: agent info file of {info.st_size:,} bytes (limit {fmt.INFO_MAX_BYTES:,})"
            )
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            try:
                data = os.read(fd, fmt.INFO_MAX_BYTES + 1)
            finally:
                os.close(fd)
        except OSError:
            return None  # replaced between stat and open: the next call reads the new one
        self._key = key
        try:
            raw = json.loads(data.decode("utf-8", "replace"))
        except ValueError as exc:
            raise CollectorError(f"{self.path}: agent info is not JSON: {exc}") from None
        return raw, parse_info(raw, self.path)
