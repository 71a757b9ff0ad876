"""The Live screen's "where the pool is" panel, from MonitorState.pool (collectors/pool.py): plain values.

On unified memory (GB10) the pool is the machine: the GPU's allocations (NVML per process), every process's
anonymous memory, the page cache split into what the experiment's processes map and what the kernel gives back
on demand, shared memory, the kernel, and free. Beside them the three numbers an engine may read as "free":
MemAvailable, MemFree and CUDA's mem_get_info as an agent's process sees it, with the difference between them
named: on a GB10 CUDA's free is MemFree, so page cache counts as used. On a discrete GPU the same parts show
the host's memory (the GPU's own memory is the device bars' business).
"""

from __future__ import annotations

from collectors.snapshots import MonitorState, PoolParts
from tui.widgets.data import POOL_PARTS, PoolData, Segment
from tui.widgets.fmt import GIB

CUDA_MATCHES_MEMFREE = 256 * 2**20  # CUDA's free within this of MemFree (sampled apart): "it is MemFree"


def _g(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GIB:.1f}"


def _segments(p: PoolParts) -> tuple[tuple[Segment, ...], str]:
    """The bar's parts, and a note when NVML's per-process sum does not fit in what meminfo leaves over."""
    gpu = p.gpu_held if p.unified else None
    note = ""
    unitemized = p.unitemized
    if gpu is not None and unitemized is not None:
        if gpu <= unitemized:
            unitemized -= gpu
        else:
            note = (
                f"NVML's per-process sum ({_g(gpu)} GiB) is more than /proc/meminfo leaves unitemized "
                f"({_g(unitemized)} GiB): part of the GPU's memory is counted in another field"
            )
            gpu = None
    cache = p.reclaimable_cache
    parts = (
        ("gpu", gpu),
        ("unitemized", unitemized),
        ("processes", p.processes),
        ("files", p.experiment_files),
        ("cache", cache),
        ("shmem", p.shmem),
        ("kernel", p.kernel),
        ("free", p.free),
    )
    return tuple(Segment(key, n) for key, n in parts if n is not None and n > 0), note


def _parts_line(p: PoolParts, segments: tuple[Segment, ...]) -> str:
    texts = []
    for seg in segments:
        label, glyph, _ = POOL_PARTS[seg.key]
        extra = ""
        if seg.key == "unitemized":
            label = "driver & firmware (not itemized)" if p.unified else "other (not itemized)"
            if p.not_read:
                label = f"not itemized (with {', '.join(p.not_read)}: not read)"
        if seg.key == "files" and p.files_source:
            extra = f" ({p.files_source})"
        if seg.key == "shmem" and p.dev_shm is not None:
            extra = f" (/dev/shm {_g(p.dev_shm)})"
        if seg.key == "kernel" and p.kernel_reclaimable:
            extra = f" ({_g(p.kernel_reclaimable)} reclaimable)"
        texts.append(f"{glyph} {label} {_g(seg.bytes)}{extra}")
    return " · ".join(texts) + " GiB"


def _free_line(p: PoolParts) -> str:
    """MemAvailable, MemFree and CUDA's free side by side."""
    parts = [f"MemAvailable {_g(p.available)}", f"MemFree {_g(p.free)}"]
    for c in p.cuda:
        parts.append(f"CUDA free {_g(c.free)} of {_g(c.total)} (pid {c.pid} GPU {c.device})")
    if p.gpu_held is not None:
        parts.append(f"Σ per-process GPU {_g(p.gpu_held)} (NVML)")
    return " · ".join(parts) + " GiB"


def _difference_line(p: PoolParts) -> str:
    """The gap between "free as CUDA sees it" and MemAvailable, named (unified memory only)."""
    if not p.unified or p.free is None:
        return ""
    gap = p.available - p.free
    cuda = p.cuda[0] if p.cuda else None
    if cuda is not None and abs(cuda.free - p.free) > CUDA_MATCHES_MEMFREE:
        return (
            f"CUDA's free ({_g(cuda.free)}) is not MemFree ({_g(p.free)}) here: MemAvailable is "
            f"{_g(p.available - cuda.free)} GiB above it"
        )
    seen = "on a GB10 CUDA's free is MemFree"
    if cuda is not None:
        seen = f"CUDA's free (pid {cuda.pid}) is MemFree"
    what = []
    if p.reclaimable_cache is not None:
        what.append(f"the reclaimable page cache {_g(p.reclaimable_cache)}")
    if p.kernel_reclaimable is not None:
        what.append(f"slab {_g(p.kernel_reclaimable)}")
    named = f" ({' and '.join(what)} GiB)" if what else ""
    return (
        f"{seen}: page cache counts as used, {_g(gap)} GiB under MemAvailable{named}; "
        "a start-up check on mem_get_info sees that much less"
    )


def _kernel_log_lines(p: PoolParts, now: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(plain lines, alert lines) about the driver's out-of-memory lines in the kernel log."""
    log = p.kernel_log
    if log is None:
        return (), ()
    if not log.readable:
        return (log.why,), ()
    before = f" ({log.before_start} before memsight started)" if log.before_start else ""
    if not log.since_start:
        return (f"kernel log: no NV_ERR_NO_MEMORY line since memsight started{before}",), ()
    ago = f", the last {max(0.0, now - log.last_t):.0f} s ago" if log.last_t is not None else ""
    last = log.last_lines[-1] if log.last_lines else ""
    return (), (f"kernel log: the NVIDIA driver could not get memory {log.since_start} time(s){before}{ago}: "
                f"{last[:140]}",)  # fmt: skip


def pool_data(state: MonitorState) -> PoolData | None:
    """The panel's values; None without an OS sample. Times count from the state's (a replay's: recorded)."""
    p = state.pool
    if p is None:
        return None
    segments, note = _segments(p)
    where = "unified pool (GPU and CPU)" if p.unified else "host memory"
    if not p.unified and state.nvml.devices:
        where += " (the GPU's own memory is in the bars above)"
    title = f"where the pool is: {where}, {_g(p.total)} GiB (MemTotal)"
    if p.free is None and p.processes is None and p.kernel is None:
        # no MemFree, AnonPages or kernel fields in the sample: nothing to decompose, and said so
        why = (
            "not decomposed: this sample has no MemFree, AnonPages or kernel figures (a recording made "
            "before memsight read them, or no /proc/meminfo)"
        )
        return PoolData(title, p.total, (), (why, _free_line(p)))
    lines = [_parts_line(p, segments), _free_line(p)]
    for extra in (_difference_line(p), note):
        if extra:
            lines.append(extra)
    plain, alert = _kernel_log_lines(p, state.t)
    return PoolData(title, p.total, segments, (*lines, *plain), alert)
