"""The values the collectors hand to the rest of memsight: immutable snapshots, one concept each.

Everything here is a frozen, slotted dataclass of plain Python values (ints for bytes, floats for rates,
strings for labels), so a `MonitorState` can be handed to the UI thread without copying or locking.

Conventions shared by every class:
* bytes are `int`; `None` means "unknown" (the source did not say, or the read failed), never zero;
* a field a device or driver does not support is `None` *and* its name is listed in `unsupported`,
  so "Not Supported" stays distinct from "failed this time" and from a real 0.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collectors.agent_info import AgentInfo
    from collectors.summary import RunSummary

# An empty read-only mapping used as a default (a shared immutable value, not mutable state).
_EMPTY: Mapping = MappingProxyType({})
# records of an agent's history over which its real sampling rate is measured (about 6 s at 10 Hz)
SAMPLED_HZ_WINDOW = 64


# --------------------------------------------------------------------------------------------- OS
@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One process, as the OS sees it (plus its NVML usage when the monitor could match the pid)."""

    pid: int
    name: str  # /proc/<pid>/comm
    cmdline: str  # space-joined argv, possibly truncated
    user: str  # owner's user name (or the uid as text)
    rss: int  # resident set size, bytes
    growth_bytes: int | None  # rss change over the growth window; None while the process is newer than it
    is_new: bool  # first seen after the collector's first sample
    gpu_bytes: int | None = None  # sum of its per-process NVML usage over devices; None if NVML did not say
    start_ticks: int = 0  # /proc/<pid>/stat starttime (clock ticks since boot): tells a reused pid apart
    growth_window_s: float = 0.0  # the window growth_bytes covers (seconds actually spanned)

    @property
    def label(self) -> str:
        """What a user calls it: its short command line ("python gen.py"), else its name."""
        return short_command(self.cmdline) or self.name


def held_bytes(p: ProcessInfo) -> int:
    """What a process holds of the machine's memory as the alert rules count it: RSS + its NVML bytes."""
    return p.rss + (p.gpu_bytes or 0)


@dataclass(frozen=True, slots=True)
class ProcessBytes:
    """A process table reduced to what the alert rules read of an older state: (pid, start ticks, held bytes)
    for each process, packed as int64 triples in one array. 8 bytes a figure, where a table of ProcessInfo
    took 112 bytes a process plus its ints: the rules' minute of states at 2 Hz held 3,456 of those, 0.45 MiB
    of the Live screen's resident size (issue 20)."""

    packed: array

    @classmethod
    def of(cls, processes: tuple[ProcessInfo, ...]) -> ProcessBytes:
        return cls(array("q", [x for p in processes for x in (p.pid, p.start_ticks, held_bytes(p))]))

    def by_process(self) -> dict[tuple[int, int], int]:
        """(pid, start ticks) -> RSS + GPU bytes."""
        it = iter(self.packed)
        return {(pid, start): held for pid, start, held in zip(it, it, it, strict=True)}


def short_command(cmdline: str, max_words: int = 3, width: int = 40) -> str:
    """'/usr/bin/python3 /home/u/gen.py --model x' -> 'python3 gen.py --model': the first words, paths cut to
    their last part, at most `width` characters ("" for an empty command line: kernel threads)."""
    words = cmdline.split()
    if not words:
        return ""
    parts = [w.rsplit("/", 1)[-1] if "/" in w and not w.startswith("-") else w for w in words[:max_words]]
    text = " ".join(p for p in parts if p)
    return text if len(text) <= width else text[: width - 1] + "…"


# its numeric fields that are sampled into rings and recorded: collectors/recording_format.py's OS_FIELDS
@dataclass(frozen=True, slots=True)
class OSSnapshot:
    """Host memory at time t (bytes; from /proc/meminfo, /proc/pressure/memory, /proc/vmstat, or from
    psutil where there is no procfs: see `source`)."""

    t: float
    mem_total: int
    mem_available: int
    cached: int | None  # /proc: Cached; psutil: its "cached" (Linux: Cached + SReclaimable); None: not given
    shmem: int | None  # /proc: Shmem; psutil: "shared"; None where the platform does not say (macOS)
    swap_total: int
    swap_free: int
    psi_some_avg10: float | None  # percent; None where the kernel has no PSI
    psi_full_avg10: float | None
    oom_kill: int | None  # cumulative count from /proc/vmstat; None on kernels without it
    processes: tuple[ProcessInfo, ...]  # top processes by rss, plus the fastest growers
    skipped_processes: int = 0  # processes that vanished or denied access during this sample
    source: str = "proc"  # "proc" (read proc_root) | "psutil" (no procfs there: PSI, oom_kill are None)
    # The rest of /proc/meminfo the pool's decomposition needs (collectors/pool.py); None where not given
    # (psutil gives MemFree and Buffers only; recordings made before these fields: all None)
    mem_free: int | None = None  # MemFree: what CUDA's mem_get_info reports as free on a GB10
    buffers: int | None = None  # Buffers (block-device page cache)
    anon_pages: int | None = None  # AnonPages: every process's anonymous resident memory
    sreclaimable: int | None = None  # SReclaimable: kernel slab the kernel can give back
    kernel: int | None = None  # Slab + KernelStack + PageTables + SecPageTables: the kernel's own memory

    @property
    def system_used(self) -> int:
        """MemTotal − MemAvailable: what the OS cannot give a new allocation without reclaiming."""
        return self.mem_total - self.mem_available


# --------------------------------------------------------------------------------------------- the pool
@dataclass(frozen=True, slots=True)
class KernelLogStatus:
    """What the kernel log said about the NVIDIA driver's memory at one poll (collectors/kernel_log.py)."""

    readable: bool
    why: str  # "" when readable; else why not ("kernel log not readable: /dev/kmsg: Operation not permitted")
    before_start: int = 0  # matching lines already in the log when memsight started
    since_start: int = 0  # matching lines logged since
    last_lines: tuple[str, ...] = ()  # the newest matching lines (message text, without the record prefix)
    last_t: float | None = None  # wall time of the newest matching line (None: none seen)


@dataclass(frozen=True, slots=True)
class PoolDetail:
    """What the pool's decomposition needs beyond /proc/meminfo, sampled every few seconds
    (collectors/pool.py): it costs a smaps_rollup read per experiment process and a kernel log read."""

    t: float
    # (pid, file-backed resident bytes) of the experiment's processes (agents, NVML compute processes)
    files: tuple[tuple[int, int], ...] = ()
    files_source: str = ""  # "Pss_File (smaps_rollup)" | "RssFile (status)" | both joined | "" (none read)
    dev_shm_used: int | None = None  # bytes used on /dev/shm (None: not mounted or not readable)
    kernel_log: KernelLogStatus | None = None


@dataclass(frozen=True, slots=True)
class CudaView:
    """torch.cuda.mem_get_info as one agent's process sees it (sampled inside the process, at most 1/s)."""

    pid: int
    device: int
    free: int
    total: int


@dataclass(frozen=True, slots=True)
class PoolParts:
    """Where host memory (the whole pool on unified memory) is, part by part, in bytes; None: not known.

    The parts itemized by /proc/meminfo add up with `unitemized` to `total` by construction:
    free + processes + page_cache + shmem + kernel + unitemized == total, a part not read (`not_read`:
    psutil's figures, a recording of `free`/`top` output) counted in `unitemized`. On unified memory the
    GPU's allocations are in none of meminfo's fields (a GB10 engine's RSS leaves them out): they are in
    `unitemized`, and `gpu_held` (NVML's per-process sum) says how much of it they are."""

    total: int  # MemTotal
    unified: bool
    available: int  # MemAvailable
    free: int | None  # MemFree
    processes: int | None  # AnonPages: every process's anonymous resident memory
    page_cache: int | None  # Buffers + Cached - Shmem
    experiment_files: int | None  # file pages the experiment's processes map (part of page_cache)
    shmem: int | None  # Shmem (tmpfs such as /dev/shm, shared anonymous memory)
    dev_shm: int | None  # of which on /dev/shm
    kernel: int | None  # Slab + KernelStack + PageTables + SecPageTables
    kernel_reclaimable: int | None  # SReclaimable (part of kernel)
    unitemized: int | None  # total - every part above that was read (None without MemFree)
    gpu_held: int | None  # sum of NVML's per-process usage (None: NVML gave none)
    files_source: str = ""
    not_read: tuple[str, ...] = ()  # parts not read ("processes", "kernel", ...): counted in unitemized
    cuda: tuple[CudaView, ...] = ()
    kernel_log: KernelLogStatus | None = None

    @property
    def reclaimable_cache(self) -> int | None:
        """Page cache no experiment process maps: the kernel gives it back on demand (MemAvailable counts it,
        CUDA's free on a GB10 does not)."""
        if self.page_cache is None:
            return None
        return self.page_cache - (self.experiment_files or 0)


# --------------------------------------------------------------------------------------------- NVML
@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_bytes: int | None  # None: NVML gave no value for this process (NVML_VALUE_NOT_AVAILABLE)
    kind: str  # "compute" | "graphics"


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    index: int
    name: str
    uuid: str
    total: int | None
    reserved: int | None  # driver/firmware reserved (memory info v2 only)
    used: int | None
    free: int | None
    unified: bool  # shares system memory (GB10 / Grace-class / integrated): headroom is MemAvailable
    utilization_gpu: float | None  # percent
    processes: tuple[GpuProcess, ...]
    unsupported: tuple[str, ...]  # names of fields the device answered NOT_SUPPORTED for
    errors: tuple[str, ...] = ()  # "field: message" for reads that failed for another reason

    @property
    def processes_used_bytes(self) -> int | None:
        """Sum of per-process usage on this device; None if no process gave a number."""
        values = [p.used_bytes for p in self.processes if p.used_bytes is not None]
        return sum(values) if values else None


@dataclass(frozen=True, slots=True)
class NVMLSnapshot:
    status: str  # "ok" | "no NVML library: ..." | "NVML init failed: ..." | "no NVIDIA device"
    available: bool
    devices: tuple[DeviceInfo, ...]
    t: float = 0.0
    driver_version: str | None = None


# --------------------------------------------------------------------------------------------- agent
@dataclass(frozen=True, slots=True)
class AgentRecord:
    """One decoded agent record: one process, one device (device -1: process-level, no CUDA), one tick.

    Byte fields are None when unknown (CUDA not initialized, the stat absent on this build)."""

    t: float
    device: int  # CUDA device index; -1 for a process-level record (CUDA not initialized)
    cuda_state: str  # "CUDA not initialized (torch not imported)" | "CUDA not initialized" | "ok"
    allocated: int | None  # memory_stats allocated_bytes.all.current
    reserved: int | None  # reserved_bytes.all.current
    peak_allocated: int | None  # allocated_bytes.all.peak (== max_memory_allocated)
    active: int | None  # active_bytes.all.current
    inactive_split: int | None  # inactive_split_bytes.all.current: free bytes stranded in split blocks
    alloc_retries: int | None  # num_alloc_retries (cudaMalloc failed, cache flushed, retried)
    num_ooms: int | None
    segments: int | None  # segment.all.current
    large_pool_reserved: int | None
    small_pool_reserved: int | None
    cuda_free: int | None  # mem_get_info (sampled at most once a second: it synchronizes)
    cuda_total: int | None
    is_integrated: bool | None  # torch.cuda.get_device_properties(d).is_integrated
    rss: int | None  # the process's resident set size
    weights_bytes: int | None  # tracked model parameters + buffers on this device; None: nothing tracked
    kv_bytes: int | None  # tracked KV cache tensors on this device; None: nothing tracked
    step_index: int  # number of mark_step() calls so far (0: none)
    step_label: str  # label of the latest step mark ("prefill", "decode", ...)
    step_t: float | None  # time of the latest step mark
    tick_cost_s: float | None  # how long the agent's previous tick took (its own overhead)


@dataclass(frozen=True, slots=True)
class AgentView:
    """What the monitor knows about one in-process agent (one experiment process)."""

    pid: int
    start_ticks: int  # process start time (clock ticks since boot), from the ring file's name and header
    cmdline: str
    path: str  # the ring file
    # "ok" | "CUDA not initialized" | "CUDA not initialized (torch not imported)" | "exited" | "pid reused"
    # | "stale"
    status: str
    alive: bool
    latest: tuple[AgentRecord, ...]  # newest record per device (device -1 first when present)
    history: tuple[AgentRecord, ...]  # recent records, oldest first (all devices interleaved)
    lost_records: int = 0  # records overwritten in the ring file before the monitor read them
    hz: float = 0.0  # the sampling rate the agent was asked for
    # what the agent published beside its ring (tracked models' config, caches, phase peaks, hook status):
    # collectors/agent_info.py; None until it published one (nothing tracked, or an older agent)
    info: AgentInfo | None = None

    # the rate measured on every record the monitor read, before it kept them at its own rate (collectors/
    # monitor.py); None: measured on `history` (a replay of a recording that kept every record)
    measured_hz: float | None = None

    @property
    def sampled_hz(self) -> float | None:
        """The rate the agent really sampled at over its recent records (None: too few to tell). Below `hz`
        when its CPU budget held it back on a machine that cannot afford the asked rate."""
        if self.measured_hz is not None:
            return self.measured_hz
        return sampled_rate(r.t for r in self.history[-SAMPLED_HZ_WINDOW:])


def sampled_rate(times) -> float | None:
    """Records per second over these record times (None: fewer than three distinct ones)."""
    distinct = sorted(set(times))
    if len(distinct) < 3 or distinct[-1] <= distinct[0]:
        return None
    return (len(distinct) - 1) / (distinct[-1] - distinct[0])


# --------------------------------------------------------------------------------------------- buckets
@dataclass(frozen=True, slots=True)
class MeasuredBuckets:
    """The four buckets as measured for one (agent process, device). None = unknown, never a guess.

    weights + kv + activations + allocator_gap + non_torch (+ other_allocated) approximates what the
    driver sees the process use; each term comes from a different counter, see collectors/buckets.py."""

    pid: int
    device: int
    weights_bytes: int | None  # tracked model parameters + buffers
    kv_bytes: int | None  # tracked KV cache tensors
    activations_bytes: int | None  # peak allocated in the current/last step − the step's steady level
    allocator_gap_bytes: int | None  # reserved − allocated: cached by PyTorch, not in a tensor
    non_torch_bytes: int | None  # driver-visible process usage − reserved (context, cuBLAS, NCCL, graphs)
    other_allocated_bytes: int | None  # steady allocated − weights − kv: live tensors nobody tracked
    allocated: int | None
    reserved: int | None
    peak_allocated: int | None  # peak used for activations_bytes
    driver_used_bytes: int | None  # per-process NVML usage of this pid on this device
    step_label: str = ""
    notes: tuple[str, ...] = ()  # why a field is None, or how a number was obtained

    @property
    def overhead_bytes(self) -> int | None:
        """allocator gap + non-PyTorch memory; None unless both are known."""
        if self.allocator_gap_bytes is None or self.non_torch_bytes is None:
            return None
        return self.allocator_gap_bytes + self.non_torch_bytes


# --------------------------------------------------------------------------------------------- alerts
@dataclass(frozen=True, slots=True)
class Alert:
    t: float  # when the condition was seen
    kind: str  # "headroom" | "new_process" | "process_growth" | "alloc_retries" | "ooms" | "oom_kill"
    #            | "fragmentation" | "driver_oom" | "headroom_runway"
    severity: str  # "warning" | "critical"
    message: str  # one line, units labelled, e.g. "pid 4242 (python) grew 3.10 GiB in 30 s"
    pid: int | None = None
    device: int | None = None
    value: float | None = None  # the measured number that tripped the rule (bytes or a count)


# --------------------------------------------------------------------------------------------- vLLM
@dataclass(frozen=True, slots=True)
class VLLMModelStats:
    """One vLLM engine's figures from its /metrics (one per model_name / engine label pair).

    None: the server did not export that metric (another vLLM version names it differently, or not at all)."""

    model_name: str  # the model_name label ("" when the series carry none)
    engine: str | None  # the engine label (V1, one per data-parallel engine); None in V0
    kv_cache_usage: float | None  # fraction of KV blocks in use, 0..1
    kv_cache_metric: str | None  # which metric gave it: vllm:kv_cache_usage_perc | vllm:gpu_cache_usage_perc
    requests_running: int | None
    requests_waiting: int | None
    requests_swapped: int | None  # V0 only
    preemptions_total: int | None  # cumulative
    prefix_cache_hits: int | None  # cumulative (tokens in vLLM >= 0.10; V1 before it: see the metric's HELP)
    prefix_cache_queries: int | None
    prefix_cache_metrics: tuple[str, ...] = ()  # the metric names the two prefix figures came from
    gpu_prefix_cache_hit_rate: float | None = None  # V0's gauge (0..1)
    cpu_cache_usage: float | None = None  # V0's CPU swap space usage (0..1)

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """hits / queries over the server's life; None without both (or with no query yet)."""
        if self.prefix_cache_hits is None or not self.prefix_cache_queries:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries


@dataclass(frozen=True, slots=True)
class VLLMSnapshot:
    """One scrape of a vLLM server's /metrics. `models` is empty unless status == "ok"."""

    t: float
    url: str
    # "ok" | "no samples: ..." | "no vLLM metrics: ..." | "connection refused: ..." | "timed out ..."
    # | "HTTP 404 ..." | "malformed /metrics ..." | "cannot reach ..."
    status: str
    available: bool
    models: tuple[VLLMModelStats, ...] = ()
    num_gpu_blocks: int | None = None  # from vllm:cache_config_info, when exported
    block_size: int | None = None  # tokens per KV block (cache_config_info)
    gpu_memory_utilization: float | None = None  # cache_config_info
    samples: int = 0  # samples in the scrape (all names)
    scrape_s: float | None = None  # how long the request took
    # values refused as outside what vLLM can report (a usage of -3, 5, inf, NaN; a negative count), one line
    # each: those figures are None (unknown) in `models`, and said on screen (collectors/vllm_metrics.py)
    refused: tuple[str, ...] = ()

    @property
    def kv_capacity_tokens(self) -> int | None:
        """num_gpu_blocks × block_size: the KV pool's size in tokens, when the server says both."""
        if self.num_gpu_blocks is None or self.block_size is None:
            return None
        return self.num_gpu_blocks * self.block_size


# --------------------------------------------------------------------------------------------- peers
@dataclass(frozen=True, slots=True)
class PeerSnapshot:
    """Another machine's memsight, as its exporter served it (collectors/peers.py). After a failed fetch the
    figures are the last good ones (ok_t says when), and status says why the latest fetch failed."""

    url: str
    status: str  # "ok" | "not reached yet" | "down: connection refused: ..." | "down: timed out ..."
    t: float  # when the latest fetch was made
    ok_t: float | None = None  # when the figures below were fetched (None: never)
    took_s: float | None = None  # how long the latest good fetch took
    peer_t: float | None = None  # the peer's own state time (memsight_state_timestamp_seconds)
    headroom_bytes: int | None = None
    headroom_source: str = ""
    total_bytes: int | None = None
    unified: bool = False
    buckets: tuple[tuple[str, int | None], ...] = ()  # (weights|kv|activations|overhead, summed over agents)
    agents: int = 0
    warnings: int = 0  # alerts in the peer's recent list
    criticals: int = 0


# --------------------------------------------------------------------------------------------- state
@dataclass(frozen=True, slots=True)
class MonitorState:
    """One immutable view of everything sampled, for the UI. Built by the collector threads, so
    `Monitor.state()` returns it without work or locks."""

    t: float
    os: OSSnapshot | None
    nvml: NVMLSnapshot
    agents: tuple[AgentView, ...]  # latest record + short history of each live agent
    buckets: tuple[MeasuredBuckets, ...]  # one per (agent pid, device)
    alerts: tuple[Alert, ...]  # newest last
    unified: bool  # one shared pool (GB10 / integrated)
    headroom_bytes: int | None  # MemAvailable on unified memory, device free on discrete
    # what headroom_bytes is out of (collectors/state.py headroom_of): MemTotal for MemAvailable, the device's
    # total for device free (NVML's, or the agent's cuda_total); None when unknown
    headroom_total_bytes: int | None
    headroom_source: str  # "MemAvailable" | "device free (NVML)" | "device free (agent)" | "unknown"
    # history[name] == (times, values): two equal-length tuples, oldest first, values in bytes.
    # Names: "allocated", "reserved", "gap" (sums over agents and devices), "available" (MemAvailable),
    # "headroom", and per agent device "allocated:<pid>:<dev>", "reserved:<pid>:<dev>", "gap:<pid>:<dev>".
    history: Mapping[str, tuple[tuple[float, ...], ...]]
    # On unified memory the three numbers side by side (None elsewhere or when a part is unknown):
    system_used_bytes: int | None = None  # MemTotal − MemAvailable
    gpu_held_bytes: int | None = None  # sum of per-process NVML usage
    unified_gap_bytes: int | None = None  # system used − GPU-held (CPU-side use, page cache pressure...)
    dropped: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # per source: samples lost
    source_status: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # "os"/"nvml"/"agents": ok|why
    restarts: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # sampling thread: times restarted
    replay: bool = False  # True when the state comes from a recording (ReplayMonitor)
    # bad input skipped while everything else goes on, per source, one line with its count ("agents":
    # "skipped 3 bad record(s) ...", "replay": "skipped 2 bad event(s) ..."); shown on screen
    input_warnings: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    vllm: VLLMSnapshot | None = None  # the latest scrape of --vllm-url; None when no URL was given
    # --engine-url's latest scrape (collectors.engine_metrics.EngineSnapshot) and what the followed child log
    # says (collectors.engine_log_follow.FollowedLog): None when not asked for / not recognized yet
    engine: Any = None
    engine_log: Any = None
    # peaks, lowest headroom and alerts since the monitor started (collectors/summary.py); None before a build
    summary: RunSummary | None = None
    # where the pool is (collectors/pool.py): unified memory or a discrete GPU's host; None: no OS sample
    pool: PoolParts | None = None
    peers: tuple[PeerSnapshot, ...] = ()  # other machines' memsight (--peer), latest fetch of each
    # on the older states the alert rules keep (collectors/state.py _for_alerts), whose os.processes is then
    # empty: each process's RSS + GPU bytes, packed; None on every state the screens get
    process_bytes: ProcessBytes | None = None

    def bytes_by_process(self) -> dict[tuple[int, int], int]:
        """(pid, start ticks) -> RSS + GPU bytes of each process in this state's table (empty without one)."""
        if self.process_bytes is not None:
            return self.process_bytes.by_process()
        if self.os is None:
            return {}
        return {(p.pid, p.start_ticks): held_bytes(p) for p in self.os.processes}


def tightest_agent_record(views: tuple[AgentView, ...]) -> AgentRecord | None:
    """The agents' latest record of the device with the least free memory (their mem_get_info): where the
    headroom is read from when NVML gives no device's free memory. None when no agent reports one."""
    records = [r for view in views for r in view.latest if r.cuda_free is not None]
    return min(records, key=lambda r: r.cuda_free, default=None)
