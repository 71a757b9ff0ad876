"""A recording's format (JSON lines): what collectors/recorder.py writes and collectors/recording.py reads,
with the constants and table functions both sides share. Standard library only (and memsight's leaves), so
`memsight replay --json` reads a file without the snapshot classes (issue 20).

One JSON object per line, `"k"` saying which kind. Format 2 (the writer now) writes each stream as it changes:
  header      {"k":"header","version":2,"created":t,"host":...,"hz":...,"agent_hz":...,"proc_lines":"entry"}
  os          {"k":"os","t", <OS fields that changed>, "skipped"?, "source"?, "w"? (the growth window
               most rows share), and the process table only when it changed: "procs":[[pid,start_ticks,
               name,rss,growth,is_new,user(,window)],...] in full (a row without a window has "w"), or
               "pset":[rows added or changed; [pid,start,rss,growth] when only those changed] + "pdel":
               [[pid,start_ticks] gone]: the previous table with those rows, largest RSS first
               (apply_proc_delta)}
  proc        {"k":"proc","pid","start","cmdline"}        (each time a process enters the table, before the
               os line it is in: a reader needs the command lines of the current table alone. A header
               without "proc_lines":"entry" (written before it) declared each process the first time only)
  nvml        {"k":"nvml","t","status","available","driver","devices":[{...DeviceInfo...}]} when the
               devices or the driver's answer changed, else {"k":"nvml","t","dset":[{"index", the fields of
               that device that changed}]}; nothing while nothing changed
  agent_meta  {"k":"agent_meta","pid","start","cmdline","path","hz"}
  agent       {"k":"agent","pid","start","t","dev", "r":[RECORD_FIELDS..., label] (the first record of a
               device) or "d":[index, value, ...] (the values that changed since that device's previous
               record; tick_cost_s rounded to the microsecond), and "status","alive","lost","sr" (the rate
               the agent sampled at, 0.1 Hz) only when they changed}
  agent_info  {"k":"agent_info","pid","start","t","info":{...}}   (each new version of the agent's info file:
               tracked models' config, caches, phase peaks, hook status; collectors/agent_info.py)
  vllm        {"k":"vllm","t","url","status","available","num_gpu_blocks","block_size",
               "gpu_memory_utilization","samples","models":[{...VLLMModelStats...}]}   (--vllm-url only)
  engine      {"k":"engine","t","url","kind","status","available","kv_usage","kv_tokens_used",
               "kv_tokens_total","running","waiting","loads":[{name,size,size_vram,context_length}],
               "slots":[{id,n_ctx,processing}]}                            (--engine-url only)
  engine_log  {"k":"engine_log","t","engine","stage","devices":[{device,weights,kv,activations,overhead}],
               "ranks","figures":{name: value}}   (each time the followed child log says something new)
  alert       {"k":"alert","t","kind","severity","message","pid","device","value"}  (raised during the run)
  pool        {"k":"pool","t","files":[[pid,bytes],...],"files_source","dev_shm_used","kernel_log":{...}}
              (every few seconds: what the pool's decomposition reads beyond meminfo, collectors/pool.py)
  summary     {"k":"summary","t",...collectors.summary.summary_to_json...}         (last line, at the end)
  skip        {"k":"skip","t","source":"agents","path","reason"}   (an agent file or directory not read: why)
  scope       {"k":"scope","t","own":[pid,...]}   (`memsight run`: the command's own agents, each time the set
               grows; a replay sums those alone in its chart and summary, as the run did)
Every KEYFRAME_S seconds the OS and NVML lines and each agent's next record are written in full again, so
a line lost in the middle (a bad sector, a hand edit) costs at most that long of those streams (the reader
skips their changes until the next full line, and counts them). Format 1 wrote every os line and agent
record in full (the process table at every OS tick); collectors/recording.py reads both and turns format 2
back into format 1's events, so everything downstream reads one shape.
Numbers are bytes; null is unknown; the string "unsupported" never appears for a number (DeviceInfo keeps
its `unsupported` list instead).
"""

from __future__ import annotations

import math
import operator

from collectors import agent_format as fmt
from collectors.errors import CollectorError
from planner import limits  # a stdlib-only leaf: the limits every reader shares

FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)  # collectors/recording.py reads these
KEYFRAME_S = 60.0
# the header's "proc_lines": a proc line precedes each entry of a process into the table (not its first alone)
PROC_LINES_ON_ENTRY = "entry"
# The numeric fields of an OSSnapshot that are sampled into rings and recorded (one list for both; the
# snapshot class is collectors/snapshots.py's, which imports this).
OS_FIELDS = (
    "mem_total",
    "mem_available",
    "cached",
    "shmem",
    "swap_total",
    "swap_free",
    "psi_some_avg10",
    "psi_full_avg10",
    "oom_kill",
    "mem_free",
    "buffers",
    "anon_pages",
    "sreclaimable",
    "kernel",
)
# an os line's fields besides t and the process table ("w": the growth window most rows share)
OS_SCALARS = (*OS_FIELDS, "skipped", "source", "w")
AGENT_CARRIED = ("status", "alive", "lost", "sr")  # per agent, written when they change
TICK_COST = fmt.RECORD_FIELDS.index("tick_cost_s")
ALERT_KEYS = ("t", "kind", "severity", "message", "pid", "device", "value")


# ----------------------------------------------------------------------------------- the process table
def with_window(rows: list[list], window: float | None) -> list[list]:
    """Format 2's rows (7 values: the table's window; 8: their own) as format 1 writes them (8 values)."""
    return [row if len(row) == 8 else [*row, 0.0 if window is None else window] for row in rows]


def apply_proc_delta(previous: list[list], pset: list[list], pdel: list[list]) -> list[list]:
    """The process table after a format-2 change: `previous` without the `pdel` (pid, start) rows, with the
    `pset` rows replacing theirs or added ([pid, start, rss, growth]: only those two changed), largest RSS
    first (ties keep their order; unchanged rows stay the same objects). ValueError when a row to remove or
    update is not in the table."""
    table = {(row[0], row[1]): row for row in previous}
    for key in pdel:
        if table.pop((key[0], key[1]), None) is None:
            raise ValueError(f"process {key[0]} (start {key[1]}) removed but not in the table")
    for row in pset:
        key = (row[0], row[1])
        if len(row) == 4:
            old = table.get(key)
            if old is None:
                raise ValueError(f"process {key[0]} (start {key[1]}) updated but not in the table")
            row = [*old[:3], row[2], row[3], *old[5:]]
        table[key] = row
    return sorted(table.values(), key=_RSS, reverse=True)  # a stable sort: reversed, ties keep their order


_RSS = operator.itemgetter(3)


def proc_delta(previous: list[list] | None, rows: list[list]) -> dict:
    """The shortest exact way to write `rows` after `previous` (both as format 2 writes them): {}
    (unchanged), {"pset", "pdel"} or {"procs"} (the first table, or when the change would not give back
    these rows in this order)."""
    if previous is not None and rows == previous:
        return {}
    if previous is None:
        return {"procs": rows}
    before = {(row[0], row[1]): row for row in previous}
    now = {(row[0], row[1]) for row in rows}
    pset = []
    for row in rows:
        old = before.get((row[0], row[1]))
        if old == row:
            continue
        only_size = old is not None and old[:3] == row[:3] and old[5:] == row[5:]
        pset.append([*row[:2], row[3], row[4]] if only_size else row)
    pdel = [[pid, start] for pid, start in before if (pid, start) not in now]
    if len(pset) * 2 > len(rows) or apply_proc_delta(previous, pset, pdel) != rows:
        return {"procs": rows}
    return {"pset": pset, "pdel": pdel} if pdel else {"pset": pset}


# ------------------------------------------------------------------------- an agent record's values
# An agent record is RECORD_FIELDS' floats (NaN: unknown) and a label, in the agent's ring file
# (collectors/agent_reader.py) and in a recording (null for NaN). Both read each value through FIELD_VALUE.
def _opt_int(x: float) -> int | None:
    return None if x != x else int(x)


def _cuda_state(x: float) -> str:
    index = _opt_int(x)
    return fmt.CUDA_STATES[index] if index is not None and 0 <= index < 3 else "unknown"


def _opt_float(x: float) -> float | None:
    return None if x != x else x


# each record field's value from the float the ring (or a recording) holds, NaN for unknown
FIELD_VALUE = {
    **dict.fromkeys(fmt.RECORD_FIELDS, _opt_int),
    "t": float,
    "device": int,
    "cuda_state": _cuda_state,
    "is_integrated": lambda x: None if x != x else bool(x),
    "step_index": lambda x: int(x) if x == x else 0,
    "step_t": _opt_float,
    "tick_cost_s": _opt_float,
}
MAX_DEVICES = 4096  # a device index at or above this is not a device


def record_fields(values: tuple) -> dict:
    """A record's payload (RECORD_FIELDS floats + label bytes) -> {field: value, "step_label": str}, the
    fields of collectors.snapshots.AgentRecord; CollectorError for a payload with a non-finite or
    out-of-range number (the ring's reader counts it as a bad record and goes on)."""
    *numbers, label = values
    v = dict(zip(fmt.RECORD_FIELDS, numbers, strict=True))
    _check_numbers(v)
    fields = {name: FIELD_VALUE[name](x) for name, x in v.items()}
    fields["step_label"] = label.rstrip(b"\0").decode("utf-8", "replace")
    return fields


def recorded_record_fields(values: list) -> dict:
    """record_fields of an agent line's "r" (RECORD_FIELDS numbers or null, then the label)."""
    *numbers, label = values
    if len(numbers) != len(fmt.RECORD_FIELDS):
        raise CollectorError(f"agent record with {len(numbers)} numbers, expected {len(fmt.RECORD_FIELDS)}")
    floats = tuple(math.nan if v is None else float(v) for v in numbers)
    return record_fields((*floats, str(label).encode()))


def _check_numbers(v: dict[str, float]) -> None:
    """CollectorError unless every number is NaN (unknown) or finite within the limits: a slot is written by
    another process, so it is input like any file (inf in one slot crashed `watch` before this check)."""
    for name, x in v.items():
        if x != x:
            continue
        if not math.isfinite(x) or abs(x) > limits.MAX_MEASURED:
            raise CollectorError(f"agent record field {name} is {x!r}, not a finite number within 2**63")
    t, device = v["t"], v["device"]
    if t != t or not 0 <= t <= limits.MAX_TIMESTAMP:
        raise CollectorError(f"agent record time {t!r} is not a time (0 .. {limits.bound('MAX_TIMESTAMP')})")
    if device != device or not -1 <= device < MAX_DEVICES or device != int(device):  # -1: the CPU
        raise CollectorError(f"agent record device {device!r} is not a device index")
