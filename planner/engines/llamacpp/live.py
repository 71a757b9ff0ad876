"""llama.cpp's buckets from its own start-up log, for the Live screen and the recording: per device, the
model buffers as weights, the KV buffers as KV, the compute buffers as activations and the output buffer as
overhead. Host buffers (CPU, CPU_Mapped, CPU_REPACK, CUDA_Host: pinned host memory) are the "CPU" device."""

from __future__ import annotations

from planner.engines.base import DeviceBuckets, LiveBuckets
from planner.engines.llamacpp.log import LlamaCppLog

MiB = 2**20
_BUCKETS = (("weights", "model_buffer"), ("kv", "kv_buffer"), ("activations", "compute_buffer"),
            ("overhead", "output_buffer"))  # fmt: skip


def device_of(buffer: str) -> str:
    """The memory a llama.cpp buffer lives in: a GPU ("CUDA0", "ROCm1", "Metal") or the host ("CPU")."""
    name = buffer.split("_")[0]
    return "CPU" if name.upper() in ("CPU", "") or buffer.endswith("_Host") else name


def live_buckets(log: LlamaCppLog) -> LiveBuckets | None:
    if not log.is_llamacpp:
        return None
    sums: dict[str, dict[str, int]] = {}
    sources = []
    for bucket, name in _BUCKETS:
        found = log.by_device(name)
        if found:
            sources.append(f"{bucket}: {name.replace('_', ' ')} size per device")
        for buffer, fig in found.items():
            device = sums.setdefault(device_of(buffer), {})
            device[bucket] = device.get(bucket, 0) + round(fig.value * MiB)
    order = sorted(sums, key=lambda d: (d == "CPU", d))
    devices = tuple(DeviceBuckets(d, *(sums[d].get(b) for b, _ in _BUCKETS)) for d in order)
    figures = tuple(
        (
            f"{name}:{fig.rank}" if fig.rank else name,
            float(round(fig.value * MiB)) if fig.unit == "MiB" else fig.value,
        )
        for name in sorted(log.figures)
        for fig in log.by_device(name).values()
    )
    return LiveBuckets("llamacpp", log.stage, devices, tuple(sources), figures, silent=silent(log))


def silent(log: LlamaCppLog) -> str:
    """Why a llama-server that is up logged no buffer: 0c1e570 prints its buffer lines (load_tensors,
    llama_kv_cache, sched_reserve) at log level 4 only, and its default is 3."""
    if not log.server_up or any(log.figures.get(name) for _, name in _BUCKETS):
        return ""
    level = log.context.get("verbosity")
    if level is not None and int(level) >= 4:
        return ""  # at level 4 the lines would be there: the reason is another one
    at = f" (this one logs at verbosity {level})" if level else ""
    return f"this llama-server logs its buffers only at -lv 4 (--verbosity 4){at}"


def planned_buckets(sheet) -> DeviceBuckets | None:  # noqa: ANN001  (planner.engines.worksheet.Worksheet)
    """llama.cpp's own model for the Live plan row: its model buffers (every device) as weights, the KV cache,
    the compute buffer (derived from the graph; the GPU's, else the host's) as activations."""
    terms = {t.name: t.bytes for t in sheet.terms}
    weights = [b for name, b in terms.items() if name.startswith("model buffer")]
    if not weights and "KV cache" not in terms:
        return None
    # a CPU-only run's compute buffer is the host one (llama.cpp's CPU backend computes there)
    compute = terms.get("compute buffer, GPU") or terms.get("compute buffer, host") or None
    return DeviceBuckets("planned", sum(weights) if weights else None, terms.get("KV cache"), compute)
