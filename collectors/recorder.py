"""Recording to a file (JSON lines): the writer. The format it writes, and that collectors/recording.py reads,
is described in collectors/recording_format.py, with the constants and table functions both sides share.

Appends are flushed at least once a second, so a crash loses at most the last second; a reader skips a
truncated last line (and counts any other unreadable line instead of failing).
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from collectors import agent_format as fmt
from collectors.errors import CollectorError
from collectors.recording_format import (
    FORMAT_VERSION,
    KEYFRAME_S,
    OS_FIELDS,
    PROC_LINES_ON_ENTRY,
    TICK_COST,
    proc_delta,
    recorded_record_fields,
)
from collectors.snapshots import (
    AgentRecord,
    Alert,
    NVMLSnapshot,
    OSSnapshot,
    ProcessInfo,
    VLLMSnapshot,
)
from collectors.summary import RunSummary, alert_to_json, summary_to_json

PENDING_MAX_BYTES = 256 * 1024  # lines held before a write, between the once-a-second flushes


def _num(x: float | int | None) -> float | int | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return x


def same(a: Any, b: Any) -> bool:
    """Equal and of one type (0 == 0.0 == False in Python, not in the file)."""
    return type(a) is type(b) and a == b


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
    """An agent line's "r" as the AgentRecord it was written from (CollectorError: not one)."""
    return AgentRecord(**recorded_record_fields(values))


def proc_row(p: ProcessInfo) -> list:
    window = round(p.growth_window_s, 3)
    return [p.pid, p.start_ticks, p.name, p.rss, p.growth_bytes, int(p.is_new), p.user, window]


def common_window(rows: list[list]) -> float:
    """The growth window most rows share (every process older than the window has the same one; it moves
    at every scan, so format 2 writes it once per table as "w" and rows carry only a different one)."""
    counts: dict[float, int] = {}
    for row in rows:
        counts[row[7]] = counts.get(row[7], 0) + 1
    return max(counts, key=lambda w: (counts[w], w)) if counts else 0.0


class Recorder:
    """Appends snapshots to a file. Not thread-safe by itself: the Monitor calls it under its own lock.

    `agent_hz` is only written to the header (what the monitor kept of each agent's records: Monitor)."""

    def __init__(
        self,
        path: str | os.PathLike,
        hz: float = 0.0,
        flush_interval_s: float = 1.0,
        agent_hz: float | None = None,
    ) -> None:
        self.path = os.fspath(path)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
            self._fd: int | None = os.open(self.path, flags, 0o666)
        except OSError as exc:
            raise CollectorError(f"cannot write the recording {self.path}: {exc}") from exc
        self.flush_interval_s = flush_interval_s
        self._last_flush = time.monotonic()
        # the processes of the last table written: one that enters the table is declared again (its command
        # line), so neither this writer nor a reader keeps every process a day has seen (issue 20)
        self._declared_procs: set[tuple[int, int]] = set()
        self._seen_agents: set[tuple[int, int]] = set()
        self._last_nvml: str | None = None
        self._last_vllm: str | None = None
        # format 2: what the file holds so far, each stream's last values (None: write in full next)
        self._os_scalars: dict[str, Any] | None = None
        self._procs: list[list] | None = None
        self._records: dict[tuple[int, int, int], list] = {}
        self._carried: dict[tuple[int, int], dict[str, Any]] = {}
        self._nvml: dict[str, Any] | None = None
        self._keyframe_t: float | None = None
        self._last_engine: str | None = None
        self._last_engine_log: str | None = None
        # Lines wait here, not in a file object's buffer, and are written by os.write: what the file holds is
        # then known exactly (a full disk takes part of a write, then refuses), so a failure says how many
        # whole records reached the file, never how many were handed to a buffer that was then lost.
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self.lines = 0  # records written whole to the file
        self.failed: str | None = None  # why recording stopped (a write failed), once it has
        header = {
            "k": "header",
            "version": FORMAT_VERSION,
            "created": time.time(),
            "host": socket.gethostname(),
            "hz": hz,
            "proc_lines": PROC_LINES_ON_ENTRY,
        }
        if agent_hz is not None:
            header["agent_hz"] = agent_hz if math.isfinite(agent_hz) else "all"
        self._write(header)

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

    def keyframe(self) -> None:
        """Write the OS and NVML lines and each agent's record in full at their next line."""
        self._os_scalars = None
        self._procs = None
        self._nvml = None
        self._last_nvml = None
        self._records.clear()
        self._carried.clear()

    def os(self, snap: OSSnapshot) -> None:
        if self._keyframe_t is None or not 0 <= snap.t - self._keyframe_t < KEYFRAME_S:
            self.keyframe()
            self._keyframe_t = snap.t
        before = self._declared_procs
        self._declared_procs = {(p.pid, p.start_ticks) for p in snap.processes}
        for p in snap.processes:
            if (p.pid, p.start_ticks) not in before:
                self._write({"k": "proc", "pid": p.pid, "start": p.start_ticks, "cmdline": p.cmdline[:200]})
        rows = [proc_row(p) for p in snap.processes]
        window = common_window(rows)
        rows = [row[:7] if row[7] == window else row for row in rows]
        scalars = {name: getattr(snap, name) for name in OS_FIELDS}
        scalars["skipped"] = snap.skipped_processes
        scalars["source"] = snap.source
        scalars["w"] = window
        last = self._os_scalars
        changed = scalars if last is None else {k: v for k, v in scalars.items() if not same(v, last[k])}
        self._write({"k": "os", "t": snap.t, **changed, **proc_delta(self._procs, rows)})
        self._os_scalars, self._procs = scalars, rows

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
        last, self._nvml = self._nvml, body
        same_devices = last is not None and [d["index"] for d in last["devices"]] == [
            d["index"] for d in body["devices"]
        ]
        if not same_devices or any(not same(body[k], last[k]) for k in ("status", "available", "driver")):
            self._write({"k": "nvml", "t": snap.t, **body})
            return
        changes = []
        for device, before in zip(body["devices"], last["devices"], strict=True):
            changed = {k: v for k, v in device.items() if v != before[k]}
            if changed:
                changes.append({"index": device["index"], **changed})
        self._write({"k": "nvml", "t": snap.t, "dset": changes})

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

    def pool(self, detail) -> None:  # noqa: ANN001  (collectors.snapshots.PoolDetail)
        from collectors.pool import pool_detail_to_json  # noqa: PLC0415  (pool imports the snapshots only)

        self._write({"k": "pool", **pool_detail_to_json(detail)})

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
        sampled_hz: float | None = None,
    ) -> None:
        """`records`: those the monitor kept (Monitor keeps them at its own rate unless asked otherwise)."""
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
        sr = None if sampled_hz is None else round(sampled_hz, 1)
        carried = {"status": status, "alive": alive, "lost": lost, "sr": sr}
        for r in records:
            values = record_values(r)
            if values[TICK_COST] is not None:
                values[TICK_COST] = round(values[TICK_COST], 6)  # shown nowhere; its 17 digits change always
            event: dict[str, Any] = {"k": "agent", "pid": pid, "start": start, "t": r.t, "dev": r.device}
            last = self._carried.get((pid, start))
            changed = carried if last is None else {k: v for k, v in carried.items() if not same(v, last[k])}
            event.update(changed)
            self._carried[(pid, start)] = carried
            previous = self._records.get((pid, start, r.device))
            if previous is None:
                event["r"] = values
            else:
                event["d"] = [x for i in range(2, len(values)) if not same(values[i], previous[i])
                              for x in (i, values[i])]  # fmt: skip
            self._records[(pid, start, r.device)] = values
            self._write(event)

    def agent_info(self, pid: int, start: int, t: float, raw: dict) -> None:
        self._write({"k": "agent_info", "pid": pid, "start": start, "t": t, "info": raw})


def __getattr__(name: str) -> Any:
    """The reading half moved out (issue 20): the reader to collectors/recording.py, its checks to
    recording_checks.py, the --json document to recording_summary.py; old imports keep working."""
    if name in _MOVED:
        import importlib  # noqa: PLC0415

        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MOVED = {
    "Recording": "collectors.recording",
    "read_recording": "collectors.recording",
    "RecordingReader": "collectors.recording",
    "check_event": "collectors.recording_checks",
    "summarize": "collectors.recording_summary",
    "vllm_source_id": "collectors.recording_summary",
}
