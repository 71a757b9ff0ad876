"""memsight's measured side: OS, NVML and in-process agent collectors, rings, buckets, alerts, record/replay.

Exports load on first use (PEP 562): the agent bootstrap imports `collectors.agent` inside every experiment
process, which must not pay for psutil, pynvml or the monitor.
"""

from __future__ import annotations

import importlib

# Exported name -> (home module, name there).
_HOMES = {
    "AgentRecord": ("collectors.snapshots", "AgentRecord"),
    "AgentView": ("collectors.snapshots", "AgentView"),
    "Alert": ("collectors.snapshots", "Alert"),
    "AlertOptions": ("collectors.alerts", "AlertOptions"),
    "CollectorError": ("collectors.errors", "CollectorError"),
    "DeviceInfo": ("collectors.snapshots", "DeviceInfo"),
    "GpuProcess": ("collectors.snapshots", "GpuProcess"),
    "MeasuredBuckets": ("collectors.snapshots", "MeasuredBuckets"),
    "Monitor": ("collectors.monitor", "Monitor"),
    "MonitorState": ("collectors.snapshots", "MonitorState"),
    "NVMLCollector": ("collectors.nvml_collector", "NVMLCollector"),
    "NVMLSnapshot": ("collectors.snapshots", "NVMLSnapshot"),
    "OSCollector": ("collectors.os_collector", "OSCollector"),
    "OSSnapshot": ("collectors.snapshots", "OSSnapshot"),
    "ProcessInfo": ("collectors.snapshots", "ProcessInfo"),
    "ReplayMonitor": ("collectors.replay", "ReplayMonitor"),
    "TimeGate": ("collectors.ring", "TimeGate"),
    "UNSUPPORTED": ("collectors.ring", "UNSUPPORTED"),
    "demo_recording_path": ("collectors.replay", "demo_recording_path"),
    "evaluate_alerts": ("collectors.alerts", "evaluate"),
    "is_unknown": ("collectors.ring", "is_unknown"),
    "is_unsupported": ("collectors.ring", "is_unsupported"),
    "measure_buckets": ("collectors.buckets", "measure"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    try:
        module_name, attribute = _HOMES[name]
    except KeyError:
        raise AttributeError(f"module 'collectors' has no attribute {name!r}") from None
    return getattr(importlib.import_module(module_name), attribute)
