"""Recording to a file (JSON lines) and reading it back.

One JSON object per line, `"k"` saying which kind:
  header      {"k":"header","version":1,"created":t,"host":...,"hz":...}
  os          {"k":"os","t",mem_total,...,"procs":[[pid,start_ticks,name,rss,growth,is_new,user],...]}
  proc        {"k":"proc","pid","start","cmdline"}        (first time a process appears)
  nvml        {"k":"nvml","t","status","available","driver","devices":[{...DeviceInfo...}]}
  agent_meta  {"k":"agent_meta","pid","start","cmdline","path","hz"}
  agent       {"k":"agent","pid","start","status","alive","lost","r":[RECORD_FIELDS..., label]}
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
  summary     {"k":"summary","t",...collectors.summary.summary_to_json...}         (last line, at the end)
  skip        {"k":"skip","t","source":"agents","path","reason"}   (an agent file or directory not read: why)
  scope       {"k":"scope","t","own":[pid,...]}   (`memsight run`: the command's own agents, each time the set
               grows; a replay sums those alone in its chart and summary, as the run did)
Numbers are bytes; null is unknown; the string "unsupported" never appears for a number (DeviceInfo keeps
its `unsupported` list instead).

Appends are flushed at least once a second, so a crash loses at most the last second; a reader skips a
truncated last line (and counts any other unreadable line instead of failing).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from collectors import agent_format as fmt
from collectors.errors import CollectorError
from collectors.snapshots import (
    OS_FIELDS,
    AgentRecord,
    Alert,
    DeviceInfo,
    GpuProcess,
    NVMLSnapshot,
    OSSnapshot,
    ProcessInfo,
    VLLMModelStats,
    VLLMSnapshot,
)
from collectors.summary import RunSummary, alert_to_json, summary_to_json
from collectors.vllm_metrics import checked_snapshot
from planner import limits  # a stdlib-only leaf: the limits every reader shares

FORMAT_VERSION = 1
ALERT_KEYS = ("t", "kind", "severity", "message", "pid", "device", "value")


def _num(x: float | int | None) -> float | int | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return x


def record_values(r: AgentRecord) -> list:
    values = []
    for name in fmt.RECORD_FIELDS:
        if name == "cuda_state":
            values.append(fmt.CUDA_STATES.index(r.cuda_state) if r.cuda_state in fmt.CUDA_STATES else None)
        elif name == "is_integrated":
            values.append(None if r.is_integrated is None else int(r.is_integrated))
        else:
            values.append(_num(getattr(r, name)))
    return [*values, r.step_label]


def record_from_values(values: list) -> AgentRecord:
    from collectors.agent_reader import decode  # noqa: PLC0415

    *numbers, label = values
    if len(numbers) != len(fmt.RECORD_FIELDS):
        raise CollectorError(f"agent record with {len(numbers)} numbers, expected {len(fmt.RECORD_FIELDS)}")
    floats = tuple(math.nan if v is None else float(v) for v in numbers)
    return decode((*floats, str(label).encode()))


PENDING_MAX_BYTES = 256 * 1024  # lines held before a write, between the once-a-second flushes


class Recorder:
    """Appends snapshots to a file. Not thread-safe by itself: the Monitor calls it under its own lock."""

    def __init__(self, path: str | os.PathLike, hz: float = 0.0, flush_interval_s: float = 1.0) -> None:
        self.path = os.fspath(path)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
            self._fd: int | None = os.open(self.path, flags, 0o666)
        except OSError as exc:
            raise CollectorError(f"cannot write the recording {self.path}: {exc}") from exc
        self.flush_interval_s = flush_interval_s
        self._last_flush = time.monotonic()
        self._seen_procs: set[tuple[int, int]] = set()
        self._seen_agents: set[tuple[int, int]] = set()
        self._last_nvml: str | None = None
        self._last_vllm: str | None = None
        self._last_engine: str | None = None
        self._last_engine_log: str | None = None
        # Lines wait here, not in a file object's buffer, and are written by os.write: what the file holds is
        # then known exactly (a full disk takes part of a write, then refuses), so a failure says how many
        # whole records reached the file, never how many were handed to a buffer that was then lost.
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self.lines = 0  # records written whole to the file
        self.failed: str | None = None  # why recording stopped (a write failed), once it has
        self._write(
            {
                "k": "header",
                "version": FORMAT_VERSION,
                "created": time.time(),
                "host": socket.gethostname(),
                "hz": hz,
            }
        )

    def _write(self, obj: dict) -> None:
        if self._fd is None:
            return
        line = (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")
        self._pending.append(line)
        self._pending_bytes += len(line)
        due = time.monotonic() - self._last_flush >= self.flush_interval_s
        if due or self._pending_bytes >= PENDING_MAX_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write what is pending; on a failed write (disk full, I/O error) stop and say why, once."""
        if self._fd is None:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as exc:
            self.lines += data.count(b"\n", 0, written)  # a cut last line is skipped by the reader
            self._stop(exc)
            return
        self.lines += data.count(b"\n")
        self._last_flush = time.monotonic()

    def _stop(self, exc: OSError) -> None:
        """A write failed: stop recording, say why once, keep what is on disk. What reached the file is a
        prefix of the stream, so it stays readable (a cut last line is skipped)."""
        fd, self._fd = self._fd, None
        kept = f"kept the first {self.lines} record(s), whole" if self.lines else "no record reached it"
        self.failed = f"recording stopped: cannot write {self.path}: {exc.strerror or exc} ({kept})"
        self._pending.clear()
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError as exc:  # an NFS server reports a failed write at close
                self.failed = f"recording stopped: cannot write {self.path}: {exc.strerror or exc}"

    def os(self, snap: OSSnapshot) -> None:
        for p in snap.processes:
            key = (p.pid, p.start_ticks)
            if key not in self._seen_procs:
                self._seen_procs.add(key)
                self._write({"k": "proc", "pid": p.pid, "start": p.start_ticks, "cmdline": p.cmdline[:200]})
        self._write(
            {
                "k": "os",
                "t": snap.t,
                **{name: getattr(snap, name) for name in OS_FIELDS},
                "skipped": snap.skipped_processes,
                "source": snap.source,
                "procs": [
                    [
                        p.pid,
                        p.start_ticks,
                        p.name,
                        p.rss,
                        p.growth_bytes,
                        int(p.is_new),
                        p.user,
                        round(p.growth_window_s, 3),
                    ]
                    for p in snap.processes
                ],
            }
        )

    def nvml(self, snap: NVMLSnapshot) -> None:
        body = {
            "status": snap.status,
            "available": snap.available,
            "driver": snap.driver_version,
            "devices": [asdict(d) for d in snap.devices],
        }
        text = json.dumps(body, sort_keys=True)
        if text == self._last_nvml:
            return  # unchanged: replay holds the previous one
        self._last_nvml = text
        self._write({"k": "nvml", "t": snap.t, **body})

    def vllm(self, snap: VLLMSnapshot) -> None:
        body = {
            "url": snap.url,
            "status": snap.status,
            "available": snap.available,
            "num_gpu_blocks": snap.num_gpu_blocks,
            "block_size": snap.block_size,
            "gpu_memory_utilization": snap.gpu_memory_utilization,
            "samples": snap.samples,
            "refused": list(snap.refused),
            "models": [
                {k: (_num(v) if isinstance(v, float) else v) for k, v in asdict(m).items()}
                for m in snap.models
            ],
        }
        text = json.dumps(body, sort_keys=True)
        if text == self._last_vllm:
            return  # unchanged: replay holds the previous one
        self._last_vllm = text
        self._write({"k": "vllm", "t": snap.t, **body})

    def engine(self, snap) -> None:  # noqa: ANN001  (collectors.engine_metrics.EngineSnapshot)
        body = {
            "url": snap.url, "kind": snap.kind, "status": snap.status, "available": snap.available,
            "kv_usage": _num(snap.kv_usage) if snap.kv_usage is not None else None,
            "kv_tokens_used": snap.kv_tokens_used, "kv_tokens_total": snap.kv_tokens_total,
            "running": snap.running, "waiting": snap.waiting,
            "loads": [asdict(load) for load in snap.loads], "slots": [asdict(s) for s in snap.slots],
        }  # fmt: skip
        text = json.dumps(body, sort_keys=True)
        if text == self._last_engine:
            return  # unchanged: replay holds the previous one
        self._last_engine = text
        self._write({"k": "engine", "t": snap.t, **body})

    def engine_log(self, t: float, followed) -> None:  # noqa: ANN001  (engine_log_follow.FollowedLog)
        buckets = followed.buckets
        body = {
            "engine": followed.engine,
            "stage": buckets.stage if buckets is not None else getattr(followed.log, "stage", ""),
            "devices": [asdict(d) for d in buckets.devices] if buckets is not None else [],
            "ranks": buckets.ranks if buckets is not None else 1,
            "figures": {name: _num(value) for name, value in buckets.figures} if buckets is not None else {},
        }
        text = json.dumps(body, sort_keys=True)
        if text == self._last_engine_log:
            return
        self._last_engine_log = text
        self._write({"k": "engine_log", "t": t, **body})

    def alert(self, alert: Alert) -> None:
        self._write({"k": "alert", **alert_to_json(alert)})

    def scope(self, t: float, own: frozenset[int]) -> None:
        self._write({"k": "scope", "t": t, "own": sorted(own)})

    def skip(self, t: float, source: str, path: str, reason: str) -> None:
        """Input the monitor did not read (an unsafe or corrupt agent file), and why: once per reason."""
        self._write({"k": "skip", "t": t, "source": source, "path": path, "reason": reason})

    def summary(self, summary: RunSummary) -> None:
        self._write({"k": "summary", "t": summary.end_t, **summary_to_json(summary)})

    def agent(
        self,
        pid: int,
        start: int,
        cmdline: str,
        path: str,
        hz: float,
        records: Iterable[AgentRecord],
        status: str,
        alive: bool,
        lost: int,
    ) -> None:
        if (pid, start) not in self._seen_agents:
            self._seen_agents.add((pid, start))
            self._write(
                {
                    "k": "agent_meta",
                    "pid": pid,
                    "start": start,
                    "cmdline": cmdline[:300],
                    "path": path,
                    "hz": hz,
                }
            )
        for r in records:
            self._write(
                {
                    "k": "agent",
                    "pid": pid,
                    "start": start,
                    "status": status,
                    "alive": alive,
                    "lost": lost,
                    "r": record_values(r),
                }
            )

    def agent_info(self, pid: int, start: int, t: float, raw: dict) -> None:
        self._write({"k": "agent_info", "pid": pid, "start": start, "t": t, "info": raw})


# ------------------------------------------------------------------------------------------ reading
@dataclass(frozen=True, slots=True)
class Recording:
    header: dict
    events: tuple[dict, ...]  # every line after the header, in file order
    bad_lines: int  # unreadable lines skipped (a truncated last line included)
    truncated_tail: bool
    first_bad: str = ""  # why the first skipped line was skipped (line number and reason)


def read_recording(path: str | os.PathLike) -> Recording:
    """Read a recording: a regular file within MAX_RECORDING_BYTES. Every event is checked against what the
    readers use (check_event): a line that is not JSON, over MAX_RECORDING_LINE, or an event with a missing
    or wrong-typed field is skipped and counted (bad_lines, first_bad), never raised later."""
    path = os.fspath(path)
    data = limits.read_regular(path, "MAX_RECORDING_BYTES", CollectorError, "memsight recording")
    lines = data.decode("utf-8", errors="replace").split("\n")
    del data
    events: list[dict] = []
    bad = 0
    first_bad = ""
    truncated = False
    header = None
    last_index = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            if len(line) > limits.MAX_RECORDING_LINE:
                over = limits.bound("MAX_RECORDING_LINE")
                raise ValueError(f"a line of {len(line)} characters, over {over}")
            obj = limits.loads_json(line)
            if not isinstance(obj, dict) or not isinstance(obj.get("k"), str):
                raise ValueError("not a memsight record")
            if header is not None:
                check_event(obj)
        except ValueError as exc:
            bad += 1
            first_bad = first_bad or f"line {i + 1}: {exc}"
            if i == last_index:
                truncated = True
            continue
        if header is None:
            if obj.get("k") != "header":
                raise CollectorError(f"{path}: not a memsight recording (first record is not a header)")
            if obj.get("version") != FORMAT_VERSION:
                raise CollectorError(
                    f"{path}: recording format version {str(obj.get('version'))[:40]}, "
                    f"this memsight reads {FORMAT_VERSION}"
                )
            try:
                _check_fields(obj, _HEADER_FIELDS)
            except ValueError as exc:
                raise CollectorError(f"{path}: bad recording header: {exc}") from None
            header = obj
            continue
        events.append(obj)
    if header is None:
        raise CollectorError(f"{path}: empty or not a memsight recording")
    return Recording(
        header=header, events=tuple(events), bad_lines=bad, truncated_tail=truncated, first_bad=first_bad
    )


# ------------------------------------------------------------------------------------------ event checks
# What each event kind must hold for the readers (os_snapshot_from, summarize, ReplayMonitor...) to use it,
# with the types of the snapshot fields they become (collectors/snapshots.py: `int | None` is "num?").
# Kinds: "num" a finite number within MAX_MEASURED (not a bool), "time" one within [0, MAX_TIMESTAMP],
# "int" an integer within MAX_MEASURED, "str", "bool"; a trailing "?" allows null (a missing "?" field is
# null); "list-" a list when present (the readers iterate `event.get(name, [])`, so null is refused).
# Fields not listed are not read, so not checked (newer recordings may add some).
_HEADER_FIELDS = {"created": "time?", "host": "str?", "hz": "num?"}
_OS_FIELDS = {
    "t": "time", "mem_total": "num", "mem_available": "num", "cached": "num?", "shmem": "num?",
    "swap_total": "num", "swap_free": "num", "psi_some_avg10": "num?", "psi_full_avg10": "num?",
    "oom_kill": "num?", "skipped": "int?", "source": "str?", "procs": "list-",
}  # fmt: skip
_PROC_ROW = ("int", "int", "str", "num", "num?", "any", "str")  # pid, start, name, rss, growth, is_new, user
_PROC_FIELDS = {"pid": "int", "start": "int", "cmdline": "str?"}
_NVML_FIELDS = {"t": "time", "status": "str", "available": "bool", "driver": "str?", "devices": "list-"}
_DEVICE_FIELDS = {
    "index": "int", "name": "str", "uuid": "str", "total": "num?", "reserved": "num?", "used": "num?",
    "free": "num?", "unified": "bool", "utilization_gpu": "num?", "processes": "list-",
    "unsupported": "list-", "errors": "list-",
}  # fmt: skip
_GPU_PROCESS_FIELDS = {"pid": "int", "used_bytes": "num?", "kind": "str"}
_VLLM_FIELDS = {
    "t": "time", "url": "str?", "status": "str", "available": "bool", "models": "list-",
    "num_gpu_blocks": "int?", "block_size": "int?", "gpu_memory_utilization": "num?", "samples": "int?",
    "refused": "list-",
}  # fmt: skip
_VLLM_MODEL_FIELDS = {
    "model_name": "str", "engine": "str?", "kv_cache_usage": "num?", "kv_cache_metric": "str?",
    "requests_running": "int?", "requests_waiting": "int?", "requests_swapped": "int?",
    "preemptions_total": "int?", "prefix_cache_hits": "int?", "prefix_cache_queries": "int?",
    "prefix_cache_metrics": "list-", "gpu_prefix_cache_hit_rate": "num?", "cpu_cache_usage": "num?",
}  # fmt: skip
_ENGINE_FIELDS = {
    "t": "time", "url": "str?", "kind": "str?", "status": "str?", "available": "bool?", "kv_usage": "num?",
    "kv_tokens_used": "int?", "kv_tokens_total": "int?", "running": "int?", "waiting": "int?",
    "loads": "list-", "slots": "list-",
}  # fmt: skip
_ENGINE_LOAD_FIELDS = {"name": "str?", "size": "num?", "size_vram": "num?", "context_length": "int?"}
_ENGINE_LOG_FIELDS = {"t": "time", "engine": "str", "stage": "str?", "devices": "list-", "ranks": "int?"}
_ENGINE_DEVICE_FIELDS = {
    "device": "str", "weights": "num?", "kv": "num?", "activations": "num?", "overhead": "num?",
}  # fmt: skip
_SKIP_FIELDS = {"t": "time", "source": "str", "path": "str", "reason": "str"}
_AGENT_META_FIELDS = {"pid": "int", "start": "int", "cmdline": "str?", "path": "str?", "hz": "num?"}
_AGENT_FIELDS = {
    "pid": "int", "start": "int", "status": "str?", "alive": "bool?", "lost": "int?", "r": "list",
}  # fmt: skip


def _fits(value: Any, kind: str) -> bool:
    if kind.endswith("?"):
        if value is None:
            return True
        kind = kind[:-1]
    if kind == "any":
        return True
    if kind == "str":
        return isinstance(value, str) and len(value) <= limits.MAX_STRING_CHARS
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list)
    if kind == "int":
        return isinstance(value, int) and limits.finite(value)
    if kind == "time":
        return limits.finite(value, 0.0, float(limits.MAX_TIMESTAMP))
    return limits.finite(value)  # "num"


def _check_fields(obj: Any, fields: dict[str, str], where: str = "") -> None:
    if not isinstance(obj, dict):
        raise ValueError(f"{where or 'event'} is not an object")
    for name, kind in fields.items():
        if kind == "list-":
            if not isinstance(obj.get(name, []), list):
                raise ValueError(f"{where}{name} is {repr(obj[name])[:60]}, expected a list")
            continue
        value = obj.get(name)
        if not _fits(value, kind):
            shown = repr(value)[:60] if name in obj else "missing"
            raise ValueError(f"{where}{name} is {shown}, expected {kind.rstrip('?')}")


def _check_list(items: list, fields: dict[str, str], cls: type, where: str) -> None:
    """Each item becomes cls(**item): its fields checked, none unknown, every one without a default given
    (list fields are filled in by the converters)."""
    allowed = {f.name for f in dataclasses.fields(cls)}
    required = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
        and fields.get(f.name) != "list-"
    }
    for item in items:
        _check_fields(item, fields, where)
        extra = set(item) - allowed
        if extra:
            raise ValueError(f"{where}has unknown field {sorted(extra)[0]!r}")
        missing = required - set(item)
        if missing:
            raise ValueError(f"{where}{sorted(missing)[0]} is missing")


def _check_strings(items: list | None, where: str) -> None:
    if items and not all(isinstance(x, str) and len(x) <= limits.MAX_STRING_CHARS for x in items):
        raise ValueError(f"{where} must be a list of strings")


def check_event(e: dict) -> None:
    """ValueError (one line) unless event `e` holds what the readers use, with the types they expect."""
    k = e["k"]
    if not _fits(e.get("t"), "time?"):  # every kind: replay orders events by it (alert, summary, ...)
        raise ValueError(f"{k[:20]} event: t is {repr(e['t'])[:60]}, expected time")
    if k == "os":
        _check_fields(e, _OS_FIELDS, "os event: ")
        for row in e.get("procs") or ():
            if not isinstance(row, list) or not 7 <= len(row) <= 8:
                raise ValueError("os event: a process row is not a list of 7 or 8 values")
            for value, kind in zip(row, (*_PROC_ROW, "num"), strict=False):
                if not _fits(value, kind):
                    raise ValueError(f"os event: process row value {repr(value)[:60]}, expected {kind}")
    elif k == "proc":
        _check_fields(e, _PROC_FIELDS, "proc event: ")
    elif k == "nvml":
        _check_fields(e, _NVML_FIELDS, "nvml event: ")
        devices = e.get("devices") or []
        _check_list(devices, _DEVICE_FIELDS, DeviceInfo, "nvml device: ")
        for d in devices:
            _check_list(d.get("processes") or [], _GPU_PROCESS_FIELDS, GpuProcess, "nvml process: ")
            _check_strings(d.get("unsupported"), "nvml device: unsupported")
            _check_strings(d.get("errors"), "nvml device: errors")
    elif k == "vllm":
        _check_fields(e, _VLLM_FIELDS, "vllm event: ")
        _check_strings(e.get("refused"), "vllm event: refused")
        models = e.get("models") or []
        _check_list(models, _VLLM_MODEL_FIELDS, VLLMModelStats, "vllm model: ")
        for m in models:
            _check_strings(m.get("prefix_cache_metrics"), "vllm model: prefix_cache_metrics")
    elif k == "engine":
        _check_fields(e, _ENGINE_FIELDS, "engine event: ")
        for load in e.get("loads") or []:
            _check_fields(load, _ENGINE_LOAD_FIELDS, "engine load: ")
        for slot in e.get("slots") or []:
            _check_fields(slot, {}, "engine slot: ")
    elif k == "engine_log":
        _check_fields(e, _ENGINE_LOG_FIELDS, "engine_log event: ")
        for device in e.get("devices") or []:
            _check_fields(device, _ENGINE_DEVICE_FIELDS, "engine_log device: ")
        figures = e.get("figures", {})
        if not isinstance(figures, dict) or not all(_fits(v, "num?") for v in figures.values()):
            raise ValueError("engine_log event: figures must map names to numbers")
    elif k == "agent_meta":
        _check_fields(e, _AGENT_META_FIELDS, "agent_meta event: ")
    elif k == "skip":
        _check_fields(e, _SKIP_FIELDS, "skip event: ")
    elif k == "scope":
        own = e.get("own")
        if not isinstance(own, list) or not all(_fits(p, "int") for p in own):
            raise ValueError("scope event: own must be a list of pids")
    elif k == "agent":
        _check_fields(e, _AGENT_FIELDS, "agent event: ")
        r = e["r"]
        if len(r) != len(fmt.RECORD_FIELDS) + 1 or not all(_fits(v, "num?") for v in r[:-1]):
            raise ValueError(f"agent event: r must hold {len(fmt.RECORD_FIELDS)} numbers and a label")
        if not _fits(r[-1], "str"):
            raise ValueError("agent event: the record's label is not a string")
        record_from_values(r)  # CollectorError (a ValueError) for out-of-range times and devices


def os_snapshot_from(event: dict, cmdlines: dict[tuple[int, int], str]) -> OSSnapshot:
    procs = []
    for row in event.get("procs", []):
        pid, start, name, rss, growth, is_new, user = row[:7]
        window = row[7] if len(row) > 7 else 0.0
        procs.append(
            ProcessInfo(
                pid=pid,
                name=name,
                cmdline=cmdlines.get((pid, start), ""),
                user=user,
                rss=rss,
                growth_bytes=growth,
                is_new=bool(is_new),
                start_ticks=start,
                growth_window_s=window,
            )
        )
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
    )


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
    return checked_snapshot(snap)  # a recording made before values were checked, or an edited one


def vllm_source_id(model_name: str, engine: str | None) -> str:
    """The `memsight replay --json` id of one vLLM engine: vllm:<model_name>[:<engine>]."""
    return f"vllm:{model_name}" if engine is None else f"vllm:{model_name}:{engine}"


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


# ------------------------------------------------------------------------------------------ summary
class _Stats:
    __slots__ = ("min", "max", "last")

    def __init__(self) -> None:
        self.min: float | None = None
        self.max: float | None = None
        self.last: float | None = None

    def add(self, value: Any) -> None:
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)
        self.last = value


class _Source:
    def __init__(self, sid: str, kind: str, pid: int | None) -> None:
        self.id, self.kind, self.pid = sid, kind, pid
        self.samples = 0
        self.start: float | None = None
        self.end: float | None = None
        self.fields: dict[str, _Stats] = {}
        self.status: str | None = None  # agents: the last cuda_state ("CUDA not initialized", "ok", ...)
        self.name: str | None = None  # processes: /proc comm
        self.cmdline: str | None = None  # processes and agents: the command line

    def add(self, t: float, values: dict[str, Any]) -> None:
        self.samples += 1
        self.start = t if self.start is None else min(self.start, t)
        self.end = t if self.end is None else max(self.end, t)
        for name, value in values.items():
            self.fields.setdefault(name, _Stats()).add(value)

    def to_json(self) -> dict:
        out = {
            "id": self.id,
            "kind": self.kind,
            "pid": self.pid,
            "samples": self.samples,
            "start": self.start,
            "end": self.end,
            "fields": {n: {"min": s.min, "max": s.max, "last": s.last} for n, s in self.fields.items()},
        }
        if self.status is not None:
            out["status"] = self.status
        if self.name is not None:
            out["name"] = self.name
        if self.cmdline is not None:
            out["cmdline"] = self.cmdline
        return out


def summarize(recording: Recording) -> dict:
    """The `memsight replay FILE --json` document: one entry per source, min/max/last of every field."""
    sources: dict[str, _Source] = {}

    def source(sid: str, kind: str, pid: int | None) -> _Source:
        if sid not in sources:
            sources[sid] = _Source(sid, kind, pid)
        return sources[sid]

    cmdlines: dict[tuple, str] = {}
    agent_cmdlines: dict[tuple, str] = {}
    alerts: list[dict] = []
    skipped: list[dict] = []
    recorded_summary = None
    for e in _events(recording):
        k, t = e["k"], e.get("t")
        if k == "proc":
            cmdlines[(e.get("pid"), e.get("start"))] = e.get("cmdline", "")
        elif k == "agent_meta":
            agent_cmdlines[(e.get("pid"), e.get("start"))] = e.get("cmdline", "")
        elif k == "alert":
            alerts.append({key: e.get(key) for key in ALERT_KEYS})
        elif k == "skip":
            skipped.append({key: e[key] for key in ("t", "source", "path", "reason")})
        elif k == "summary":
            recorded_summary = {key: value for key, value in e.items() if key not in ("k", "t")}
        elif k == "os":
            source("os", "os", None).add(
                t,
                {f: e.get(f) for f in OS_FIELDS} | {"system_used": e["mem_total"] - e["mem_available"]},
            )
            for row in e.get("procs", []):
                pid, start, name, rss = row[:4]
                src = source(f"process:{pid}:{start}", "process", pid)
                src.add(t, {"rss": rss, "growth": row[4]})
                src.name, src.cmdline = name, cmdlines.get((pid, start), "")
        elif k == "nvml":
            for d in e.get("devices", []):
                source(f"nvml:{d['index']}", "nvml", None).add(
                    t,
                    {
                        "total": d.get("total"),
                        "reserved": d.get("reserved"),
                        "used": d.get("used"),
                        "free": d.get("free"),
                        "utilization_gpu": d.get("utilization_gpu"),
                        "processes_used": sum(
                            p["used_bytes"] for p in d.get("processes", []) if p.get("used_bytes") is not None
                        ),
                    },
                )
                for p in d.get("processes", []):
                    source(f"gpu_process:{d['index']}:{p['pid']}", "gpu_process", p["pid"]).add(
                        t, {"used_bytes": p.get("used_bytes")}
                    )
        elif k == "agent":
            r = record_from_values(e["r"])
            values = {
                name: getattr(r, name)
                for name in (
                    "allocated",
                    "reserved",
                    "peak_allocated",
                    "active",
                    "inactive_split",
                    "alloc_retries",
                    "num_ooms",
                    "segments",
                    "cuda_free",
                    "cuda_total",
                    "rss",
                    "weights_bytes",
                    "kv_bytes",
                    "step_index",
                )
            }
            if r.reserved is not None and r.allocated is not None:
                values["gap"] = r.reserved - r.allocated
            src = source(f"agent:{e['pid']}:{e['start']}:{r.device}", "agent", e["pid"])
            src.add(r.t, values)
            src.cmdline = agent_cmdlines.get((e["pid"], e["start"]), "")
            src.status = r.cuda_state
        elif k == "engine":
            src = source(f"engine:{e.get('kind') or 'unknown'}", "engine", None)
            keys = ("kv_usage", "kv_tokens_used", "kv_tokens_total", "running", "waiting")
            src.add(t, {key: e.get(key) for key in keys})
            for load in e.get("loads") or []:
                source(f"engine:ollama:{load.get('name')}", "engine", None).add(
                    t, {"size": load.get("size"), "size_vram": load.get("size_vram")}
                )
            src.status = e.get("status")
        elif k == "engine_log":
            src = source(f"engine_log:{e.get('engine')}", "engine_log", None)
            fields = dict(e.get("figures") or {})
            for d in e.get("devices") or []:
                for key in ("weights", "kv", "activations", "overhead"):
                    fields[f"{key}:{d.get('device')}"] = d.get(key)
            src.add(t, fields)
            src.status = e.get("stage")
        elif k == "vllm":
            snap = vllm_snapshot_from(e)
            if not snap.models:  # a failed scrape: one "vllm" source that says why
                src = source("vllm", "vllm", None)
                src.add(t, {})
                src.status = snap.status
            for m in snap.models:
                src = source(vllm_source_id(m.model_name, m.engine), "vllm", None)
                src.add(
                    t,
                    {
                        "kv_cache_usage": m.kv_cache_usage,
                        "requests_running": m.requests_running,
                        "requests_waiting": m.requests_waiting,
                        "requests_swapped": m.requests_swapped,
                        "preemptions_total": m.preemptions_total,
                        "prefix_cache_hits": m.prefix_cache_hits,
                        "prefix_cache_queries": m.prefix_cache_queries,
                        "num_gpu_blocks": snap.num_gpu_blocks,
                    },
                )
                src.status = snap.status
    return {
        "version": FORMAT_VERSION,
        "created": recording.header.get("created"),
        "host": recording.header.get("host"),
        "bad_lines": recording.bad_lines,
        "sources": [s.to_json() for s in sources.values()],
        "alerts": alerts,  # as raised during the run (recordings made before alerts were recorded: [])
        "skipped": skipped,  # input the monitor did not read (unsafe or corrupt agent files), with why
        "summary": recorded_summary,  # collectors.summary.summary_to_json; None in older recordings
    }


def _events(recording: Recording) -> Iterator[dict]:
    yield from recording.events
