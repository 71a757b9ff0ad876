"""Where the pool is: host memory (all of it, on unified memory) split into parts a user can act on.

/proc/meminfo itemizes most of it every tick (collectors/os_collector.py meminfo_parts); this module adds what
costs more and is read every `interval_s` (5 s) by `PoolSampler`:
* the file-backed resident memory of the experiment's processes (the agents' pids and NVML's compute
  processes): /proc/PID/smaps_rollup's Pss_File (proportional, so two engines mapping the same shards count
  them once between them), or /proc/PID/status's RssFile where smaps_rollup is refused (another user's
  process: it needs ptrace access, status does not) or absent (kernels before 4.14). Those pages are page
  cache the experiment holds mapped (model shards under mmap, libraries); the rest of the page cache is
  what the kernel gives back on demand;
* how much of Shmem is on /dev/shm (statvfs);
* the NVIDIA driver's out-of-memory lines in the kernel log (collectors/kernel_log.py).

`pool_parts` then puts one OS snapshot, NVML and the latest PoolDetail together (collectors/snapshots.py
PoolParts). Every read that fails leaves its part unknown (None), never 0.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from collectors.kernel_log import KMSG, KernelLogWatcher
from collectors.snapshots import (
    AgentView,
    CudaView,
    KernelLogStatus,
    NVMLSnapshot,
    OSSnapshot,
    PoolDetail,
    PoolParts,
)

DEV_SHM = "/dev/shm"
POOL_INTERVAL_S = 5.0  # smaps_rollup costs ~1-3 ms a process: a few processes every 5 s is well under 0.1%
SMAPS_SOURCE = "Pss_File (smaps_rollup)"
STATUS_SOURCE = "RssFile (status)"


def _field_kib(text: str, key: str) -> int | None:
    """'Pss_File:   1234 kB' -> bytes, from a smaps_rollup or status text (None: no such line)."""
    at = text.find("\n" + key + ":")
    if at < 0 and not text.startswith(key + ":"):
        return None
    line = text[at + 1 if at >= 0 else 0 :].split("\n", 1)[0]
    parts = line.split()
    try:
        return int(parts[1]) * 1024
    except (IndexError, ValueError):
        return None


def file_resident(proc_root: str, pid: int) -> tuple[int, str] | None:
    """(file-backed resident bytes, where from) of one process; None when it is gone or hides both files."""
    try:
        with open(os.path.join(proc_root, str(pid), "smaps_rollup"), encoding="ascii", errors="replace") as f:
            value = _field_kib(f.read(), "Pss_File")
        if value is not None:
            return value, SMAPS_SOURCE
    except (PermissionError, FileNotFoundError):
        pass  # refused (another user's process), or a kernel without smaps_rollup: status says RssFile
    except OSError:
        return None
    try:
        with open(os.path.join(proc_root, str(pid), "status"), encoding="ascii", errors="replace") as f:
            value = _field_kib(f.read(), "RssFile")
    except OSError:
        return None
    return (value, STATUS_SOURCE) if value is not None else None


def dev_shm_used(path: str = DEV_SHM) -> int | None:
    """Bytes in use on the tmpfs at `path`; None where it is not mounted or not readable."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class PoolSampler:
    """sample(pids) -> PoolDetail, at most every interval_s (between two, the last detail is returned)."""

    def __init__(
        self,
        proc_root: str | os.PathLike = "/proc",
        dev_shm: str = DEV_SHM,
        kernel_log: str | None = KMSG,
        interval_s: float = POOL_INTERVAL_S,
        clock=time.time,
    ) -> None:
        self.proc_root = os.fspath(proc_root)
        self.dev_shm = dev_shm
        self.interval_s = interval_s
        self._clock = clock
        self._watcher = KernelLogWatcher(kernel_log, clock=clock) if kernel_log else None
        self._last: PoolDetail | None = None

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()

    def due(self) -> bool:
        last = self._last
        return last is None or not 0 <= self._clock() - last.t < self.interval_s

    def sample(self, pids: Iterable[int]) -> PoolDetail:
        if not self.due():
            return self._last
        t = self._clock()
        files = []
        sources = set()
        for pid in sorted(set(pids)):
            got = file_resident(self.proc_root, pid)
            if got is not None:
                files.append((pid, got[0]))
                sources.add(got[1])
        log = self._watcher.poll() if self._watcher is not None else None
        self._last = PoolDetail(
            t=t,
            files=tuple(files),
            files_source=" + ".join(sorted(sources)),
            dev_shm_used=dev_shm_used(self.dev_shm),
            kernel_log=log,
        )
        return self._last


def pool_parts(
    os_snap: OSSnapshot | None,
    nvml: NVMLSnapshot,
    detail: PoolDetail | None,
    agents: tuple[AgentView, ...],
    unified: bool,
) -> PoolParts | None:
    """The decomposition of MemTotal; None without an OS sample."""
    if os_snap is None:
        return None
    o = os_snap
    page_cache = None
    if o.cached is not None and o.buffers is not None and o.shmem is not None and o.source == "proc":
        page_cache = o.buffers + o.cached - o.shmem  # Cached holds Shmem (tmpfs pages): counted once, there
    files = sum(b for _, b in detail.files) if detail is not None and detail.files else None
    if files is not None and page_cache is not None:
        files = min(files, page_cache)  # RssFile counts a page once per process mapping it
    processes, kernel = o.anon_pages, o.kernel
    shmem = o.shmem if o.source == "proc" else None  # psutil's "shared" is not meminfo's Shmem everywhere
    held = [p.used_bytes for d in nvml.devices for p in d.processes if p.used_bytes is not None]
    cuda = tuple(
        CudaView(v.pid, r.device, r.cuda_free, r.cuda_total)
        for v in agents
        for r in v.latest
        if r.device >= 0 and r.cuda_free is not None and r.cuda_total is not None
    )
    itemized = {"processes": processes, "page cache": page_cache, "shared memory": shmem, "kernel": kernel}
    unitemized = None
    if o.mem_free is not None:  # what meminfo does not itemize, beside the parts that were read
        unitemized = o.mem_total - o.mem_free - sum(n for n in itemized.values() if n is not None)
    return PoolParts(
        not_read=tuple(name for name, n in itemized.items() if n is None),
        total=o.mem_total,
        unified=unified,
        available=o.mem_available,
        free=o.mem_free,
        processes=processes,
        page_cache=page_cache,
        experiment_files=files,
        shmem=shmem,
        dev_shm=detail.dev_shm_used if detail is not None else None,
        kernel=kernel,
        kernel_reclaimable=o.sreclaimable,
        unitemized=unitemized,
        gpu_held=sum(held) if nvml.available and held else None,
        files_source=detail.files_source if detail is not None else "",
        cuda=cuda,
        kernel_log=detail.kernel_log if detail is not None else None,
    )


# ------------------------------------------------------------------------------------------ /metrics
PART_HELP = (
    "Where host memory (the whole pool on unified memory) is, by part: gpu (NVML per-process sum, "
    "unified only), processes (AnonPages), page_cache (Buffers + Cached - Shmem), experiment_files (of it, "
    "file pages the experiment's processes map), reclaimable_cache (the rest of it), shmem, dev_shm (of it, "
    "on /dev/shm), kernel (Slab + KernelStack + PageTables), kernel_reclaimable (SReclaimable), unitemized "
    "(MemTotal - the meminfo parts), free (MemFree)."
)


def pool_metrics(p: PoolParts | None) -> list[tuple[str, str, str, list]]:
    """(name, kind, help, [(labels, value)]) of the decomposition, for the exporter; None values left out."""
    if p is None:
        return []
    parts = {
        "gpu": p.gpu_held if p.unified else None,
        "processes": p.processes,
        "page_cache": p.page_cache,
        "experiment_files": p.experiment_files,
        "reclaimable_cache": p.reclaimable_cache,
        "shmem": p.shmem,
        "dev_shm": p.dev_shm,
        "kernel": p.kernel,
        "kernel_reclaimable": p.kernel_reclaimable,
        "unitemized": p.unitemized,
        "free": p.free,
    }
    out = [
        ("memsight_pool_part_bytes", "gauge", PART_HELP, [({"part": k}, v) for k, v in parts.items()]),
        (
            "memsight_agent_cuda_total_bytes",
            "gauge",
            "torch.cuda.mem_get_info total, as the process sees it.",
            [({"pid": str(c.pid), "device": str(c.device)}, c.total) for c in p.cuda],
        ),
    ]
    log = p.kernel_log
    if log is not None:
        out.append(
            (
                "memsight_kernel_log_readable",
                "gauge",
                "1 when memsight can read the kernel log (/dev/kmsg), 0 when the kernel keeps it from it.",
                [({}, 1 if log.readable else 0)],
            )
        )
        if log.readable:
            out.append(
                (
                    "memsight_driver_oom_lines_total",
                    "counter",
                    "NVIDIA driver out-of-memory lines (NV_ERR_NO_MEMORY) in the kernel log since memsight "
                    "started.",
                    [({}, log.since_start)],
                )
            )
    return out


# ------------------------------------------------------------------------------------------ recording
def pool_detail_to_json(detail: PoolDetail) -> dict:
    log = detail.kernel_log
    return {
        "t": detail.t,
        "files": [list(pair) for pair in detail.files],
        "files_source": detail.files_source,
        "dev_shm_used": detail.dev_shm_used,
        "kernel_log": None
        if log is None
        else {
            "readable": log.readable,
            "why": log.why,
            "before_start": log.before_start,
            "since_start": log.since_start,
            "last_lines": list(log.last_lines),
            "last_t": log.last_t,
        },
    }


def check_pool_event(e: dict) -> None:
    """ValueError unless a recorded "pool" event holds what pool_detail_from reads."""

    def count(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62

    files = e.get("files", [])
    if not isinstance(files, list) or not all(
        isinstance(p, list) and len(p) == 2 and count(p[0]) and count(p[1]) for p in files
    ):
        raise ValueError("pool event: files must be [pid, bytes] pairs")
    if not isinstance(e.get("files_source", ""), str):
        raise ValueError("pool event: files_source is not a string")
    if e.get("dev_shm_used") is not None and not count(e["dev_shm_used"]):
        raise ValueError("pool event: dev_shm_used is not a byte count")
    log = e.get("kernel_log")
    if log is None:
        return
    if not isinstance(log, dict) or not isinstance(log.get("readable"), bool):
        raise ValueError("pool event: kernel_log.readable is not a boolean")
    if not (count(log.get("before_start", 0)) and count(log.get("since_start", 0))):
        raise ValueError("pool event: kernel_log counts are not counts")
    lines = log.get("last_lines", [])
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise ValueError("pool event: kernel_log.last_lines is not a list of strings")
    if not isinstance(log.get("why", ""), str):
        raise ValueError("pool event: kernel_log.why is not a string")
    last_t = log.get("last_t")
    if last_t is not None and (isinstance(last_t, bool) or not isinstance(last_t, int | float)):
        raise ValueError("pool event: kernel_log.last_t is not a time")


def pool_detail_from(e: dict) -> PoolDetail:
    log = e.get("kernel_log")
    return PoolDetail(
        t=e["t"],
        files=tuple((pid, n) for pid, n in e.get("files", [])),
        files_source=e.get("files_source", ""),
        dev_shm_used=e.get("dev_shm_used"),
        kernel_log=None
        if log is None
        else KernelLogStatus(
            readable=log["readable"],
            why=log.get("why", ""),
            before_start=log.get("before_start", 0),
            since_start=log.get("since_start", 0),
            last_lines=tuple(log.get("last_lines", ())),
            last_t=log.get("last_t"),
        ),
    )
