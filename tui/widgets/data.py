"""Plain values the widgets render. The app builds them from MonitorState / Plan; widgets never fetch data.

Every field is bytes as int (None when unknown) or a preformatted string; equality of two values decides
whether a widget redraws, so they are frozen dataclasses compared field by field.
"""

from __future__ import annotations

from dataclasses import dataclass

# Measured buckets, bottom to top of a device's memory, in the order they are drawn.
# "tensors" are live tensors the agent was not told about (allocated − tracked weights − tracked KV).
# "process" is a CPU-only program's RSS less its tracked weights and KV: the interpreter, libtorch and any
# tensor not tracked, which no allocator counter tells apart off CUDA (a program on a GPU has no such row).
MEASURED_KEYS: tuple[str, ...] = (
    "other",
    "weights",
    "kv",
    "tensors",
    "process",
    "activations",
    "gap",
    "nonpytorch",
    "free",
)
# The plan's buckets (overhead covers what the measured side splits into allocator gap + non-PyTorch).
PLANNED_KEYS: tuple[str, ...] = ("other", "weights", "kv", "activations", "overhead", "free")

BUCKET_LABELS: dict[str, str] = {
    "other": "other procs / OS",
    "weights": "weights",
    "kv": "KV cache",
    "tensors": "untracked tensors",
    "process": "rest of process RSS",
    "activations": "activations",
    "gap": "alloc. cached gap",
    "nonpytorch": "non-PyTorch",
    "overhead": "overhead",
    "free": "free headroom",
}

# One colour per bucket (the legend's square); the bar's style paints the cell background with it.
BUCKET_COLOURS: dict[str, str] = {
    "other": "grey42",
    "weights": "dodger_blue2",
    "kv": "green4",
    "tensors": "steel_blue",
    "process": "light_slate_grey",
    "activations": "dark_orange3",
    "gap": "red3",
    "nonpytorch": "magenta3",
    "overhead": "purple4",
    "free": "grey30",
}
# Each bucket has its own glyph as well as its colour, so the bars read the same in a terminal without colour
# (and in `tmux capture-pane` text); the gap is the one that must catch the eye.
BUCKET_FILL: dict[str, str] = {
    "other": "▒",
    "weights": "█",
    "kv": "▓",
    "tensors": "▚",
    "process": "▙",
    "activations": "▞",
    "gap": "╳",
    "nonpytorch": "▤",
    "overhead": "▤",
    "free": "░",
}
BUCKET_STYLES: dict[str, str] = {
    **{key: f"{colour} on grey11" for key, colour in BUCKET_COLOURS.items()},
    "gap": "bold bright_white on red3",
    "free": "grey35 on grey11",
}


@dataclass(frozen=True, slots=True)
class Segment:
    key: str
    bytes: int | None


@dataclass(frozen=True, slots=True)
class BucketComparison:
    """One device (or the one unified pool): measured buckets drawn above the plan's, on one scale."""

    title: str
    capacity_bytes: int | None
    measured: tuple[Segment, ...]
    planned: tuple[Segment, ...] | None
    plan_label: str  # what the plan is for, or the planner's error message
    missing: str = ""  # one line on what could not be measured, "" when nothing is missing
    # lines from the agent's info: where each plan input came from, the phase peaks, the weights check
    notes: tuple[str, ...] = ()
    # the plan's "other procs / OS" is the measured figure itself (no --os-reserve-gib): nothing to compare
    other_planned_as_measured: bool = False

    def measured_bytes(self, key: str) -> int | None:
        return _lookup(self.measured, key)

    def planned_bytes(self, key: str) -> int | None:
        return _lookup(self.planned or (), key)


def _lookup(segments: tuple[Segment, ...], key: str) -> int | None:
    for seg in segments:
        if seg.key == key:
            return seg.bytes
    return None


@dataclass(frozen=True, slots=True)
class HeadroomData:
    headroom_bytes: int | None
    total_bytes: int | None
    source: str  # "MemAvailable" | "device free (NVML)" | ...
    warn_bytes: int
    critical_bytes: int
    missing: str = ""


@dataclass(frozen=True, slots=True)
class ProcessRow:
    pid: int
    name: str
    user: str
    rss: int
    gpu_bytes: int | None
    growth_bytes: int | None  # over the growth window; None when the process is new
    is_new: bool
    fast_growing: bool
    cmdline: str = ""
    command: str = ""  # short command line ("python gen.py"), what the tables show; "" -> the name
    own: bool = False  # one of the experiment's processes (an agent's, or the command memsight run started)


@dataclass(frozen=True, slots=True)
class AgentRow:
    pid: int
    label: str  # rank / device / command
    allocated: int | None
    reserved: int | None
    gap: int | None
    retries: int | None
    ooms: int | None
    busiest: bool
    where: str = ""  # "cuda:0", or why there is no device yet ("no CUDA yet", "no torch")
    # what the row is: one agent process (pid and start time: a reused pid is another process) on one device;
    # a process on several devices (transformers' device_map="auto", one row each) shares its pid
    key: str = ""


@dataclass(frozen=True, slots=True)
class AlertRow:
    when: str  # relative time label ("t+12.5s"), never the wall clock (snapshots stay deterministic)
    severity: str  # "info" | "warning" | "critical"
    message: str


@dataclass(frozen=True, slots=True)
class ChartSeries:
    """Allocated / reserved / gap over time, in bytes, with times in seconds relative to the first point."""

    t: tuple[float, ...]
    allocated: tuple[float, ...]
    reserved: tuple[float, ...]
    gap: tuple[float, ...]
    missing: str = ""
    # Without allocator counters (no agent, CUDA not initialized) the chart is not left empty: it draws the
    # headroom over time instead, labelled with its source (e.g. "headroom (MemAvailable)").
    fallback_label: str = ""
    fallback_t: tuple[float, ...] = ()
    fallback: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class MachineBar:
    """One machine of the capacity figure, drawn to its own capacity."""

    key: str
    label: str
    capacity_bytes: int | None
    segments: tuple[Segment, ...]  # PLANNED_KEYS order
    fits: bool | None
    max_users: int | None
    context: int
    error: str = ""


# The pool's parts (tui/widgets/pool_parts.py), in the order they are drawn, with their glyph and colour.
POOL_PARTS: dict[str, tuple[str, str, str]] = {
    "gpu": ("GPU (NVML per process)", "█", "dodger_blue2"),
    "unitemized": ("not itemized", "▤", "magenta3"),
    "processes": ("processes (anon)", "▓", "green4"),
    "files": ("page cache: experiment's files", "▚", "dark_orange3"),
    "cache": ("page cache: reclaimable", "▒", "grey50"),
    "shmem": ("shared memory", "▞", "steel_blue"),
    "kernel": ("kernel", "▥", "purple4"),
    "free": ("free", "░", "grey35"),
}


@dataclass(frozen=True, slots=True)
class PoolData:
    """Where the pool is: one bar of parts (bytes, POOL_PARTS keys) over `total`, and lines that name them."""

    title: str
    total: int
    parts: tuple[Segment, ...]
    lines: tuple[str, ...]  # the parts with their figures, MemAvailable / MemFree / CUDA's free, ...
    alert_lines: tuple[str, ...] = ()  # said in the warning style (the driver's out-of-memory lines)


# The Plan screen's (tui/screens/plan.py): its fields, the choices it offers, the view the app hands it.
FIELDS: tuple[str, ...] = ("model", "format", "kv_dtype", "context", "users", "tp")


@dataclass(frozen=True, slots=True)
class PlanChoices:
    models: tuple[str, ...]  # catalog names (a path or HF id may be typed too)
    formats: tuple[str, ...]
    kv_dtypes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PlanView:
    values: tuple[tuple[str, str], ...]  # the field values the plan was made from
    bars: tuple[MachineBar, ...]
    summary: str  # the plan's four buckets for the chosen inputs, one line
    error: str  # "" or the planner's message
    follows: str = ""  # what the plan follows (vLLM's log, a loaded model), each input's source
    vllm: str = ""  # vLLM's own model's pool for the same inputs, when the plan follows vLLM's log
    followed: tuple[str, ...] = ()  # fields the screen sets to what is planned (never one the user edited)
    prefill_chunk: int | None = None  # the followed prefill chunk (vLLM's max_num_batched_tokens); None: 8K
