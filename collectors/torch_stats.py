"""torch.cuda, behind a small interface the agent samples through (standard library only).

`TorchCuda` is the real source: it looks torch up in `sys.modules` and never imports it, and answers
nothing until the process itself initialized CUDA (`torch.cuda.is_initialized()`), so the agent can never
create a context. `RecordedCuda` serves recorded real `memory_stats()` / `memory_summary()` outputs (tests,
and hardware this machine lacks) through the same interface.

`derive(stats)` is the one place that turns a memory_stats() dict into the agent's fields: the agent reads
the allocator's stats once per tick and derives allocated, reserved, peak, ... from them (memory_allocated()
and memory_reserved() would each rebuild the whole dict). It reads them through
memory_stats_as_nested_dict() and picks the ten entries it needs (`stats_from_nested`), skipping the Python
flattening that makes memory_stats() cost.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any, Protocol

from collectors.errors import CollectorError

# agent field -> memory_stats() key
STAT_KEYS: Mapping[str, str] = {
    "allocated": "allocated_bytes.all.current",
    "reserved": "reserved_bytes.all.current",
    "peak_allocated": "allocated_bytes.all.peak",
    "active": "active_bytes.all.current",
    "inactive_split": "inactive_split_bytes.all.current",
    "alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
    "segments": "segment.all.current",
    "large_pool_reserved": "reserved_bytes.large_pool.current",
    "small_pool_reserved": "reserved_bytes.small_pool.current",
}


def derive(stats: Mapping[str, int]) -> dict[str, int | None]:
    """The agent's allocator fields from one memory_stats() dict; None for a key this build lacks."""
    return {name: (int(stats[key]) if key in stats else None) for name, key in STAT_KEYS.items()}

# each STAT_KEYS key as its path in memory_stats_as_nested_dict()
_STAT_PATHS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (key, tuple(key.split("."))) for key in STAT_KEYS.values()
)


def stats_from_nested(nested: dict[str, Any]) -> dict[str, int]:
    """The STAT_KEYS entries of `torch.cuda.memory_stats_as_nested_dict()`, under memory_stats()'s keys.

    memory_stats() is that nested dict flattened in Python: all ~120 entries joined and sorted, about 70 us a
    call (bench/memory_stats_cost.py), of which the agent reads 10. Picking them costs 1.9 us. A key this
    build lacks is left out, as memory_stats() would."""
    out: dict[str, int] = {}
    for key, path in _STAT_PATHS:
        node: Any = nested
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None  # dict, not Mapping: 3x cheaper
            if node is None:
                break
        else:
            out[key] = node
    return out


class CudaSource(Protocol):
    def state(self) -> str: ...  # "CUDA not initialized (torch not imported)" | "CUDA not initialized" | "ok"
    def device_count(self) -> int: ...
    def memory_stats(self, device: int) -> Mapping[str, int]: ...
    def mem_get_info(self, device: int) -> tuple[int, int]: ...  # (free, total); synchronizes the host
    def is_integrated(self, device: int) -> bool | None: ...
    def has_context(self, device: int, stats: Mapping[str, int]) -> bool: ...
    def reset_peak(self, device: int) -> None: ...


class TorchCuda:
    """The live torch.cuda of this process, touched only after the process initialized CUDA itself."""

    def __init__(self) -> None:
        self._integrated: dict[int, bool | None] = {}

    @staticmethod
    def _torch() -> Any | None:
        return sys.modules.get("torch")

    def state(self) -> str:
        torch = self._torch()
        if torch is None:
            return "CUDA not initialized (torch not imported)"
        cuda = getattr(torch, "cuda", None)
        try:
            if cuda is None or not cuda.is_initialized():
                return "CUDA not initialized"
        except Exception:  # a half-imported torch: treat as not ready
            return "CUDA not initialized"
        return "ok"

    def device_count(self) -> int:
        return int(self._torch().cuda.device_count())

    def memory_stats(self, device: int) -> Mapping[str, int]:
        cuda = self._torch().cuda
        nested = getattr(cuda, "memory_stats_as_nested_dict", None)
        if nested is None:  # a torch older than 1.4
            return cuda.memory_stats(device)
        return stats_from_nested(nested(device))

    def has_context(self, device: int, stats: Mapping[str, int]) -> bool:
        # mem_get_info on a device without a context would create one. Only a device where the caching
        # allocator holds memory surely has this process's context (the thread-local current device of the
        # agent's thread says nothing about the devices the program uses).
        return stats.get("reserved_bytes.all.current", 0) > 0

    def mem_get_info(self, device: int) -> tuple[int, int]:
        free, total = self._torch().cuda.mem_get_info(device)
        return int(free), int(total)

    def is_integrated(self, device: int) -> bool | None:
        if device not in self._integrated:
            try:
                props = self._torch().cuda.get_device_properties(device)
                self._integrated[device] = bool(getattr(props, "is_integrated", False))
            except Exception:
                self._integrated[device] = None
        return self._integrated[device]

    def reset_peak(self, device: int) -> None:
        self._torch().cuda.reset_peak_memory_stats(device)


# ------------------------------------------------------------------------------ recorded real values
def parse_memory_stats_text(text: str) -> dict[str, int]:
    """A printed memory_stats() (OrderedDict([...]), a list of pairs, pretty-printed or one line).
    A key broken across lines by a paste ("allocate\\nd") is rejoined; a cut-off last entry is ignored."""
    joined = re.sub(r"\s*\n\s*", "", text)
    pairs = re.findall(r"\(\s*'([^']+)'\s*,\s*(-?\d+)\s*\)", joined)
    if not pairs:
        raise CollectorError("no ('key', value) pairs found: not a printed torch.cuda.memory_stats()")
    return {key: int(value) for key, value in pairs}


_UNITS = {"B": 1, "KiB": 2**10, "K": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
_SUMMARY_ROWS = {
    "Allocated memory": "allocated_bytes",
    "Active memory": "active_bytes",
    "Requested memory": "requested_bytes",
    "GPU reserved memory": "reserved_bytes",
    "Non-releasable memory": "inactive_split_bytes",
    "Allocations": "allocation",
    "Active allocs": "active",
    "GPU reserved segments": "segment",
    "Non-releasable allocs": "inactive_split",
    "Oversize allocations": "oversize_allocations",
    "Oversize GPU segments": "oversize_segments",
}
_COLUMNS = ("current", "peak", "allocated", "freed")


def _summary_cell(cell: str) -> int | None:
    parts = cell.split()
    if not parts:
        return None
    if len(parts) == 1:
        return int(parts[0]) if parts[0].isdigit() else None
    if parts[1] not in _UNITS:
        return None
    return int(parts[0]) * _UNITS[parts[1]]


def parse_memory_summary(text: str) -> dict[str, int]:
    """torch.cuda.memory_summary() -> memory_stats()-style keys. Sizes in the table are rounded by torch
    to whole KiB/MiB/GiB, so these byte values carry that rounding (the table is all the recording has)."""
    stats: dict[str, int] = {}
    m = re.search(r"CUDA OOMs:\s*(\d+)", text)
    if m:
        stats["num_ooms"] = int(m.group(1))
    m = re.search(r"cudaMalloc retries:\s*(\d+)", text)
    if m:
        stats["num_alloc_retries"] = int(m.group(1))
    prefix = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5:
            continue
        label = cells[0]
        if label in _SUMMARY_ROWS:
            prefix, pool = _SUMMARY_ROWS[label], "all"
        elif label in ("from large pool", "from small pool") and prefix is not None:
            pool = "large_pool" if "large" in label else "small_pool"
        else:
            continue
        for column, cell in zip(_COLUMNS, cells[1:], strict=True):
            value = _summary_cell(cell)
            if value is not None:
                stats[f"{prefix}.{pool}.{column}"] = value
    if "allocated_bytes.all.current" not in stats:
        raise CollectorError("no 'Allocated memory' row: not a torch.cuda.memory_summary() table")
    return stats


class RecordedCuda:
    """A CudaSource serving recorded real values: memory_stats per device, optional mem_get_info."""

    def __init__(
        self,
        stats_by_device: Mapping[int, Mapping[str, int]],
        mem_info: Mapping[int, tuple[int, int]] | None = None,
        integrated: bool | None = None,
        state: str = "ok",
    ) -> None:
        self._stats = {d: dict(s) for d, s in stats_by_device.items()}
        self._mem_info = dict(mem_info or {})
        self._integrated = integrated
        self._state = state
        self.peak_resets: list[int] = []

    def state(self) -> str:
        return self._state

    def device_count(self) -> int:
        return len(self._stats)

    def memory_stats(self, device: int) -> Mapping[str, int]:
        return self._stats[device]

    def has_context(self, device: int, stats: Mapping[str, int]) -> bool:
        return device in self._mem_info

    def mem_get_info(self, device: int) -> tuple[int, int]:
        return self._mem_info[device]

    def is_integrated(self, device: int) -> bool | None:
        return self._integrated

    def reset_peak(self, device: int) -> None:
        self.peak_resets.append(device)
        stats = self._stats[device]
        if "allocated_bytes.all.current" in stats:
            stats["allocated_bytes.all.peak"] = stats["allocated_bytes.all.current"]
