"""Ollama's buckets from its own log (the last model load), for the Live screen and the recording: per device,
weights ("model weights"), KV ("kv cache") and the compute graph as activations ("compute graph").
"""

from __future__ import annotations

from planner.engines.base import DeviceBuckets, LiveBuckets
from planner.engines.ollama.log import OllamaLog

_UNIT = {"GiB": 2**30, "MiB": 2**20}


def _bytes(fig) -> int | None:  # noqa: ANN001
    return None if fig is None else round(fig.value * _UNIT.get(fig.unit, 1))


def live_buckets(log: OllamaLog) -> LiveBuckets | None:
    if not log.is_ollama:
        return None
    devices = []
    names = []
    for name in ("weights", "kv_cache", "compute_graph"):
        names.extend(d for d in log.devices(name) if d not in names)
    names.sort(key=lambda d: (d.upper() == "CPU", d))
    for device in names:
        devices.append(DeviceBuckets(
            device,
            _bytes(log.figure("weights", device)),
            _bytes(log.figure("kv_cache", device)),
            _bytes(log.figure("compute_graph", device)),
            None,
        ))  # fmt: skip
    sources = tuple(
        f'{label}: msg="{msg}" per device'
        for label, msg in (("weights", "model weights"), ("KV", "kv cache"), ("activations", "compute graph"))
        if log.devices(
            {"model weights": "weights", "kv cache": "kv_cache", "compute graph": "compute_graph"}[msg]
        )
    )
    figures = tuple(
        (f"{name}:{f.rank}" if f.rank else name, float(_bytes(f)) if f.unit in _UNIT else f.value)
        for name in sorted(log.figures)
        for f in [log.figures[name][-1]]
    )
    return LiveBuckets("ollama", log.stage, tuple(devices), sources, figures)
