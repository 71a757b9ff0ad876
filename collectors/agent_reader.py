"""Reads agent ring files from the monitor side: discovery, validation, incremental reads.

A reader maps the file read-only and never writes it, so any number of monitors can come and go while the
agent runs. Files that are truncated, corrupt or foreign raise CollectorError (naming the file) on open;
the monitor reports and skips them. A pid that is gone, or whose /proc start time differs from the one in
the file name (a reused pid), marks the agent "exited" / "pid reused".
"""

from __future__ import annotations

import errno
import math
import mmap
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from collectors import agent_format as fmt
from collectors.errors import CollectorError
from collectors.recording_format import record_fields
from collectors.snapshots import AgentRecord
from planner import limits  # a stdlib-only leaf: the limits every reader shares


def decode(values: tuple) -> AgentRecord:
    """A slot payload (RECORD_FIELDS floats + label bytes) -> AgentRecord; CollectorError for a payload with
    a non-finite or out-of-range number (the reader counts it as a bad record and goes on)."""
    return AgentRecord(**record_fields(values))


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: tuple[AgentRecord, ...]  # new records, oldest first
    lost: int  # records overwritten before this reader got to them
    torn: int  # slots that failed the seqlock check (being rewritten while read)
    bad: int = 0  # intact slots holding numbers no agent writes (inf, out of range): skipped, counted


class AgentReader:
    """One agent ring file, read incrementally. Use read_new() each tick; read_history() once to catch up."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        # O_NONBLOCK: a FIFO named like a ring cannot block the open; fstat of the open descriptor: what is
        # checked is what is read. Only this user's regular files that no one else can write are read, and
        # only the bytes the (bounded) header describes are mapped.
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link: it could point anywhere
                raise CollectorError(f"{self.path}: a symbolic link, not an agent's file: not read") from None
            raise CollectorError(f"cannot open agent ring file {self.path}: {exc.strerror or exc}") from None
        try:
            info = os.fstat(fd)
            reason = fmt.unsafe_file_reason(info, self.path)
            if reason is not None:
                raise CollectorError(reason)
            size = info.st_size
            if size < fmt.HEADER_SIZE:
                raise CollectorError(f"{self.path}: truncated agent ring file ({size} bytes)")
            header = fmt.unpack_header(os.pread(fd, fmt.HEADER_SIZE, 0), self.path)
            for key in ("fine_capacity", "coarse_capacity"):
                if header[key] > limits.MAX_RING_CAPACITY:
                    raise CollectorError(
                        f"{self.path}: agent ring header claims {header[key]} slots, over "
                        f"{limits.bound('MAX_RING_CAPACITY')}: not read"
                    )
            expected = fmt.file_size(header["fine_capacity"], header["coarse_capacity"])
            if size < expected:
                raise CollectorError(f"{self.path}: truncated agent ring file ({size} of {expected} bytes)")
            self._mm = mmap.mmap(fd, expected, mmap.MAP_SHARED, mmap.PROT_READ)
        except OSError as exc:
            raise CollectorError(f"cannot map agent ring file {self.path}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
        self.pid: int = header["pid"]
        self.start_ticks: int = header["start_ticks"]
        self.cmdline: str = header["cmdline"]
        self.hz: float = header["hz"]
        self.created: float = header["created"]
        self.fine_capacity: int = header["fine_capacity"]
        self.coarse_capacity: int = header["coarse_capacity"]
        self._next = 0  # next fine record number to read
        self.lost = 0
        self.torn = 0
        self.bad = 0  # records refused by decode() (non-finite or out-of-range numbers)

    def close(self) -> None:
        try:
            self._mm.close()
        except (BufferError, ValueError):
            pass

    @property
    def closed_by_agent(self) -> bool:
        return fmt.read_u64(self._mm, fmt.OFF_CLOSED) == 1

    @property
    def heartbeat(self) -> float:
        return fmt.read_f64(self._mm, fmt.OFF_HEARTBEAT)

    @property
    def count(self) -> int:
        return fmt.read_u64(self._mm, fmt.OFF_FINE_COUNT)

    def _read(self, ring: str, first: int, end: int) -> Iterator[AgentRecord | None | CollectorError]:
        """Each slot: its record, None (torn), or the CollectorError that refused its numbers."""
        for number in range(first, end):
            offset = fmt.slot_offset(ring, number, self.fine_capacity, self.coarse_capacity)
            values = fmt.read_slot(self._mm, offset, number)
            if values is None:
                yield None
                continue
            try:
                yield decode(values)
            except CollectorError as exc:
                yield exc

    def read_new(self, limit: int | None = None) -> ReadResult:
        """Records written since the last call (all still in the ring on the first call)."""
        count = self.count
        oldest = max(0, count - self.fine_capacity)
        lost = 0
        if self._next < oldest:
            lost = oldest - self._next
            self._next = oldest
        first = self._next if limit is None else max(self._next, count - limit)
        records, torn, bad = [], 0, 0
        for record in self._read("fine", first, count):
            if record is None:
                torn += 1
            elif isinstance(record, CollectorError):
                bad += 1
            else:
                records.append(record)
        self._next = count
        self.lost += lost
        self.torn += torn
        self.bad += bad
        return ReadResult(tuple(records), lost, torn, bad)

    def read_coarse(self) -> tuple[AgentRecord, ...]:
        """The coarse tier (one record per device per window, the highest-reserved one), oldest first."""
        count = fmt.read_u64(self._mm, fmt.OFF_COARSE_COUNT)
        first = max(0, count - self.coarse_capacity)
        return tuple(r for r in self._read("coarse", first, count) if isinstance(r, AgentRecord))

    def process_status(self, proc_root: str = "/proc") -> str:
        """ "alive" | "exited" | "pid reused", from /proc/<pid>/stat's start time."""
        ticks = fmt.process_start_ticks(self.pid, proc_root)
        if ticks is None:
            return "exited"
        if self.start_ticks and ticks != self.start_ticks:
            return "pid reused"
        return "alive"


def discover(directory: str) -> dict[tuple[int, int], str]:
    """(pid, start_ticks) -> path of every ring file in the directory (missing directory: none; a directory
    another user owns or can write: none, see agent_format.unsafe_dir_reason); at most MAX_RING_FILES."""
    if fmt.unsafe_dir_reason(directory) is not None:
        return {}
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    out = {}
    for name in names:
        key = fmt.parse_ring_file_name(name)
        if key is not None:
            out[key] = os.path.join(directory, name)
            if len(out) >= limits.MAX_RING_FILES:
                break
    return out


def skipped_files_line(skipped: Mapping[str, str]) -> str:
    """One line for the screen about agent files (or directories) not read, path -> why: how many, and the
    first one's reason, which names it ("" when none)."""
    if not skipped:
        return ""
    more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
    return f"skipped {len(skipped)} agent file(s): {next(iter(skipped.values()))}{more}"


def is_stale(reader: AgentReader, now: float, hz_slack: float = 20.0) -> bool:
    """No heartbeat for max(5 s, 20 periods): the agent thread is not running (a frozen or killed process)."""
    beat = reader.heartbeat
    period = 1.0 / reader.hz if reader.hz > 0 else 1.0
    return not math.isnan(beat) and now - beat > max(5.0, hz_slack * period)
