"""A recording's events as the snapshots the live monitor makes (collectors/snapshots.py): the replay's
half of reading a recording. collectors/recording.py checks and decodes the events without these classes,
so `memsight replay --json` never loads them (issue 20).
"""

from __future__ import annotations

import dataclasses
import operator

from collectors.snapshots import (
    DeviceInfo,
    GpuProcess,
    NVMLSnapshot,
    OSSnapshot,
    ProcessInfo,
    VLLMModelStats,
    VLLMSnapshot,
)


def os_snapshot_from(
    event: dict, cmdlines: dict[tuple[int, int], str], known: dict[tuple[int, int], ProcessInfo] | None = None
) -> OSSnapshot:
    """`known`: the processes of the previous snapshot (pid, start -> ProcessInfo), replaced by this one's: a
    process identical to its previous self (every field, of the same type) is that object, so the snapshots
    a replay keeps (a minute of them per checkpoint) share their unchanged processes. A process `cmdlines`
    does not name keeps its command line from `known` (a recording that declares processes as they enter
    the table: `cmdlines` holds those declared for this line alone)."""
    procs = []
    now = {}
    for row in event.get("procs", []):
        pid, start, name, rss, growth, is_new, user = row[:7]
        window = row[7] if len(row) > 7 else 0.0
        before = known.get((pid, start)) if known is not None else None
        cmdline = cmdlines.get((pid, start))
        if cmdline is None:
            cmdline = before.cmdline if before is not None else ""
        info = ProcessInfo(
            pid=pid,
            name=name,
            cmdline=cmdline,
            user=user,
            rss=rss,
            growth_bytes=growth,
            is_new=bool(is_new),
            start_ticks=start,
            growth_window_s=window,
        )
        if known is not None:
            if before is not None and _identical(_PROCESS_FIELDS(before), _PROCESS_FIELDS(info)):
                info = before
            now[(pid, start)] = info
        procs.append(info)
    if known is not None:
        known.clear()
        known.update(now)
    # a "?" field of _OS_FIELDS may be missing: check_event reads that as null, and so does this
    return OSSnapshot(
        t=event["t"],
        mem_total=event["mem_total"],
        mem_available=event["mem_available"],
        cached=event.get("cached"),
        shmem=event.get("shmem"),
        swap_total=event["swap_total"],
        swap_free=event["swap_free"],
        psi_some_avg10=event.get("psi_some_avg10"),
        psi_full_avg10=event.get("psi_full_avg10"),
        oom_kill=event.get("oom_kill"),
        processes=tuple(procs),
        skipped_processes=event.get("skipped", 0),
        source=event.get("source", "proc"),  # recordings made before psutil fallback: all /proc
        mem_free=event.get("mem_free"),  # these five: null in recordings made before they were sampled
        buffers=event.get("buffers"),
        anon_pages=event.get("anon_pages"),
        sreclaimable=event.get("sreclaimable"),
        kernel=event.get("kernel"),
    )


_PROCESS_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(ProcessInfo)))


def _identical(a: tuple, b: tuple) -> bool:
    """Equal values of the same types (1 and 1.0, False and 0 differ: a replay's output tells them apart)."""
    return all(x == y and type(x) is type(y) for x, y in zip(a, b, strict=True))


def vllm_snapshot_from(event: dict) -> VLLMSnapshot:
    models = tuple(
        VLLMModelStats(**{**m, "prefix_cache_metrics": tuple(m.get("prefix_cache_metrics", ()))})
        for m in event.get("models", [])
    )
    snap = VLLMSnapshot(
        t=event["t"],
        url=event.get("url", ""),
        status=event["status"],
        available=event["available"],
        models=models,
        num_gpu_blocks=event.get("num_gpu_blocks"),
        block_size=event.get("block_size"),
        gpu_memory_utilization=event.get("gpu_memory_utilization"),
        samples=event.get("samples", 0),
        refused=tuple(event.get("refused", ())),
    )
    # imported here: its module brings prometheus_client, which a recording without vLLM never needs
    from collectors.vllm_metrics import checked_snapshot  # noqa: PLC0415

    return checked_snapshot(snap)  # a recording made before values were checked, or an edited one


def nvml_snapshot_from(event: dict) -> NVMLSnapshot:
    devices = []
    for d in event.get("devices", []):
        procs = tuple(GpuProcess(**p) for p in d.get("processes", []))
        devices.append(
            DeviceInfo(
                **{
                    **d,
                    "processes": procs,
                    "unsupported": tuple(d.get("unsupported", ())),
                    "errors": tuple(d.get("errors", ())),
                }
            )
        )
    return NVMLSnapshot(
        status=event["status"],
        available=event["available"],
        devices=tuple(devices),
        t=event["t"],
        driver_version=event.get("driver"),
    )
