"""The NVIDIA driver's out-of-memory lines in the kernel log (/dev/kmsg), where this user may read it.

On a DGX Spark the driver can refuse an allocation (`NVRM: ... Out of memory [NV_ERR_NO_MEMORY]`) while
MemAvailable still looks healthy, and a host under that pressure can hang without an OOM kill: these lines
are the only trace. /dev/kmsg hands out one record per read(2) ("PRI,SEQ,TS_USEC,FLAGS;MESSAGE",
continuation lines starting with a space); opened O_NONBLOCK it answers EAGAIN once everything was read,
EPIPE when records were overwritten before we read them (we go on from the next one), EPERM/EACCES when the
kernel keeps its log from this user (kernel.dmesg_restrict=1 and no CAP_SYSLOG). The same reader takes
`dmesg` text ("[  81033.194223] NVRM: ..."), so a file saved with dmesg can be fed to it in tests.

`KernelLogWatcher.poll()` never raises: an unreadable log is a status line that says why, once.
"""

from __future__ import annotations

import errno
import os
import re
import time

from collectors.snapshots import KernelLogStatus

KMSG = "/dev/kmsg"
# What the driver prints when it cannot get memory for the GPU (NV_ERR_NO_MEMORY is status 0x51). Seen on GB10
# as `NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned from
# _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359` (tests/data/kernel_log/SOURCES.md).
DRIVER_OOM = re.compile(r"NV_ERR_NO_MEMORY|NVRM:.*\bout of memory\b", re.IGNORECASE)
_DMESG_LINE = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
_READ_SIZE = 8192  # one kmsg record is at most ~1 KiB of text (CONSOLE_EXT_LOG_MAX is 8 KiB)
MAX_RECORDS_PER_POLL = 20_000  # a full ring buffer is ~16k records: one poll reads it, never more
KEEP_LINES = 3  # the newest matching lines kept for the screen


def _parse_record(text: str) -> tuple[int | None, float | None, str]:
    """One kmsg record or dmesg line -> (sequence number or None, seconds since boot or None, message)."""
    head, sep, message = text.partition(";")
    if sep and "," in head and head.split(",", 1)[0].isdigit():
        fields = head.split(",")
        try:
            return int(fields[1]), int(fields[2]) / 1e6, message.split("\n", 1)[0]
        except (IndexError, ValueError):
            return None, None, message
    match = _DMESG_LINE.match(text)
    if match:
        return None, float(match.group(1)), match.group(2)
    return None, None, text


def _dmesg_restricted() -> bool:
    try:
        with open("/proc/sys/kernel/dmesg_restrict", encoding="ascii") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


class KernelLogWatcher:
    """Counts the driver's out-of-memory lines: those already logged when it started, and those since."""

    def __init__(self, path: str = KMSG, clock=time.time, uptime=time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._uptime = uptime  # kmsg times count from boot on CLOCK_MONOTONIC
        self._fd: int | None = None
        self._why = ""
        self._started = False
        self._before = 0
        self._since = 0
        self._last_seq: int | None = None
        self._lines: list[str] = []
        self._last_t: float | None = None
        self._pending = b""  # a file read (tests, dmesg text) may end inside a line

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def status(self) -> KernelLogStatus:
        return KernelLogStatus(
            readable=not self._why,
            why=self._why,
            before_start=self._before,
            since_start=self._since,
            last_lines=tuple(self._lines),
            last_t=self._last_t,
        )

    def poll(self) -> KernelLogStatus:
        """Read what the log gained since the last poll (the whole buffer the first time)."""
        if self._why and self._fd is None:
            return self.status()  # said once why not; not retried every tick
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            self._read_records()
        except OSError as exc:
            self._unreadable(exc)
        first = not self._started
        self._started = True
        if first:  # what was there before memsight started is counted apart: only new lines alert
            self._before, self._since = self._since, 0
        return self.status()

    def _unreadable(self, exc: OSError) -> None:
        self.close()
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.EPERM, errno.EACCES):
            hint = " (kernel.dmesg_restrict=1: run as root, or sysctl kernel.dmesg_restrict=0)"
            reason += hint if self.path == KMSG and _dmesg_restricted() else ""
        self._why = f"kernel log not readable: {self.path}: {reason}"

    def _read_records(self) -> None:
        for _ in range(MAX_RECORDS_PER_POLL):
            try:
                chunk = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return  # everything read (kmsg)
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # records overwritten before we read them: go on with the next one
                if exc.errno == errno.EINVAL and self.path == KMSG:
                    continue  # a record longer than our buffer: skipped
                raise
            if not chunk:
                return  # end of a plain file
            self._take(chunk)

    def _take(self, chunk: bytes) -> None:
        data = self._pending + chunk
        if self.path == KMSG:  # one record per read: complete, whatever its newlines
            records, self._pending = [data], b""
        else:
            *records, self._pending = data.split(b"\n")
        for raw in records:
            text = raw.decode("utf-8", "replace").rstrip("\n")
            if not text or text.startswith(" "):
                continue  # continuation lines (" KEY=value") carry no message
            self._record(text)

    def _record(self, text: str) -> None:
        seq, since_boot, message = _parse_record(text)
        if seq is not None:
            if self._last_seq is not None and seq <= self._last_seq:
                return  # seen (a file re-read from the start)
            self._last_seq = seq
        if not DRIVER_OOM.search(message):
            return
        self._since += 1
        self._lines = [*self._lines, message.strip()][-KEEP_LINES:]
        if since_boot is not None:
            self._last_t = self._clock() - (self._uptime() - since_boot)
