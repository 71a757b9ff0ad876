"""The agent's shared-memory ring file: layout, naming and directory rules (writer and reader share them).

Standard library only: the experiment process imports this through the bootstrap.

File = one 4,096-byte header + a fine ring (FINE_CAPACITY slots, every record) + a coarse ring
(COARSE_CAPACITY slots: per device, the record with the highest `reserved` in each COARSE_STEP_S window).
With the defaults the file is a fixed 2,757,120 bytes (2.63 MiB): the fine ring holds the last
4,096 records (6.8 minutes at 10 Hz on one device) and the coarse ring a day at 10 s per device-window;
a day at 10 Hz never grows it.

Each slot is a seqlock: `begin` (u64), the payload, `end` (u64). The writer of record n sets begin to
2n+1, writes the payload, sets end to 2n+2, then begin to 2n+2. A reader copies the slot, re-reads begin,
and accepts the copy only if begin == end == 2n+2 both times: a torn or stale slot is never returned.
The header's `count` is written after the slot, so a reader never looks past complete records.
"""

from __future__ import annotations

import os
import stat
import struct

from collectors.errors import CollectorError

MAGIC = b"MSAGENT1"
VERSION = 1
HEADER_SIZE = 4096
FINE_CAPACITY = 4096
COARSE_CAPACITY = 8640
COARSE_STEP_S = 10.0

# Every payload number is a float64: NaN = unknown. Bytes stay exact up to 2**53 (8 PiB).
RECORD_FIELDS: tuple[str, ...] = (
    "t",
    "device",
    "cuda_state",
    "allocated",
    "reserved",
    "peak_allocated",
    "active",
    "inactive_split",
    "alloc_retries",
    "num_ooms",
    "segments",
    "large_pool_reserved",
    "small_pool_reserved",
    "cuda_free",
    "cuda_total",
    "is_integrated",
    "rss",
    "weights_bytes",
    "kv_bytes",
    "step_index",
    "step_t",
    "tick_cost_s",
)
LABEL_BYTES = 24
CUDA_STATES = ("CUDA not initialized (torch not imported)", "CUDA not initialized", "ok")

_SEQ = struct.Struct("<Q")
PAYLOAD = struct.Struct(f"<{len(RECORD_FIELDS)}d{LABEL_BYTES}s")
SLOT_SIZE = 8 + PAYLOAD.size + 8

# header: fixed part, then counters at fixed offsets, then the field list and the command line
_HEAD = struct.Struct("<8sIIIIIIII Q d d d")  # magic, version, header, slot, nfields, fine, coarse, pid, pad,
#                                              start_ticks, created, hz, coarse_step
OFF_FINE_COUNT = 128
OFF_COARSE_COUNT = 136
OFF_CLOSED = 144
OFF_HEARTBEAT = 152
OFF_FIELDS = 256
OFF_CMDLINE = 1024
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")


def file_size(fine_capacity: int = FINE_CAPACITY, coarse_capacity: int = COARSE_CAPACITY) -> int:
    return HEADER_SIZE + (fine_capacity + coarse_capacity) * SLOT_SIZE


def slot_offset(ring: str, index: int, fine_capacity: int, coarse_capacity: int) -> int:
    if ring == "fine":
        return HEADER_SIZE + (index % fine_capacity) * SLOT_SIZE
    return HEADER_SIZE + fine_capacity * SLOT_SIZE + (index % coarse_capacity) * SLOT_SIZE


def pack_header(
    pid: int,
    start_ticks: int,
    created: float,
    hz: float,
    cmdline: str,
    fine_capacity: int,
    coarse_capacity: int,
    coarse_step_s: float,
) -> bytes:
    head = bytearray(HEADER_SIZE)
    _HEAD.pack_into(
        head,
        0,
        MAGIC,
        VERSION,
        HEADER_SIZE,
        SLOT_SIZE,
        len(RECORD_FIELDS),
        fine_capacity,
        coarse_capacity,
        pid,
        0,
        start_ticks,
        created,
        hz,
        coarse_step_s,
    )
    fields = ",".join(RECORD_FIELDS).encode()
    head[OFF_FIELDS : OFF_FIELDS + len(fields)] = fields
    cmd = cmdline.encode("utf-8", "replace")[: HEADER_SIZE - OFF_CMDLINE - 1]
    head[OFF_CMDLINE : OFF_CMDLINE + len(cmd)] = cmd
    return bytes(head)


def unpack_header(buf: bytes | memoryview, path: str) -> dict:
    """Validate and decode a header; CollectorError naming the file if it is not ours or not this version."""
    if len(buf) < HEADER_SIZE:
        raise CollectorError(
            f"{path}: truncated agent ring file ({len(buf)} bytes, header needs {HEADER_SIZE})"
        )
    (
        magic,
        version,
        header_size,
        slot_size,
        nfields,
        fine,
        coarse,
        pid,
        _pad,
        start_ticks,
        created,
        hz,
        step,
    ) = _HEAD.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CollectorError(f"{path}: not a memsight agent ring file (magic {magic!r})")
    if (
        version != VERSION
        or header_size != HEADER_SIZE
        or slot_size != SLOT_SIZE
        or nfields != len(RECORD_FIELDS)
    ):
        raise CollectorError(
            f"{path}: agent ring format version {version} (slot {slot_size} B) is not the "
            f"version {VERSION} (slot {SLOT_SIZE} B) this memsight reads"
        )
    fields = bytes(buf[OFF_FIELDS:OFF_CMDLINE]).rstrip(b"\0").decode(errors="replace")
    if tuple(fields.split(",")) != RECORD_FIELDS:
        raise CollectorError(f"{path}: agent ring field list differs from this memsight's")
    if fine < 1 or coarse < 1:
        raise CollectorError(f"{path}: agent ring with zero capacity")
    return dict(
        pid=pid,
        start_ticks=start_ticks,
        created=created,
        hz=hz,
        coarse_step_s=step,
        fine_capacity=fine,
        coarse_capacity=coarse,
        cmdline=bytes(buf[OFF_CMDLINE:HEADER_SIZE]).rstrip(b"\0").decode("utf-8", "replace"),
    )


def read_u64(buf, offset: int) -> int:
    return _U64.unpack_from(buf, offset)[0]


def write_u64(buf, offset: int, value: int) -> None:
    _U64.pack_into(buf, offset, value)


def read_f64(buf, offset: int) -> float:
    return _F64.unpack_from(buf, offset)[0]


def write_f64(buf, offset: int, value: float) -> None:
    _F64.pack_into(buf, offset, value)


def write_slot(buf, offset: int, number: int, payload: bytes) -> None:
    """Seqlock write of record `number` (0-based) into the slot at `offset`."""
    _SEQ.pack_into(buf, offset, 2 * number + 1)
    buf[offset + 8 : offset + 8 + PAYLOAD.size] = payload
    _SEQ.pack_into(buf, offset + 8 + PAYLOAD.size, 2 * number + 2)
    _SEQ.pack_into(buf, offset, 2 * number + 2)


def read_slot(buf, offset: int, number: int) -> tuple | None:
    """The payload of record `number` if the slot holds it intact, else None (torn, stale or overwritten)."""
    raw = bytes(buf[offset : offset + SLOT_SIZE])
    begin = _SEQ.unpack_from(raw, 0)[0]
    end = _SEQ.unpack_from(raw, 8 + PAYLOAD.size)[0]
    again = _SEQ.unpack_from(buf, offset)[0]
    want = 2 * number + 2
    if not (begin == end == again == want):
        return None
    return PAYLOAD.unpack_from(raw, 8)


# ------------------------------------------------------------------------------------------ naming
def default_agent_dir() -> str:
    """$MEMSIGHT_AGENT_DIR, else $XDG_RUNTIME_DIR/memsight, else <tmp>/memsight-<uid>."""
    explicit = os.environ.get("MEMSIGHT_AGENT_DIR")
    if explicit:
        return explicit
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "memsight")
    import tempfile  # noqa: PLC0415  (7 ms of imports a reader of recordings never needs)

    return os.path.join(tempfile.gettempdir(), f"memsight-{os.getuid()}")


def ensure_private_dir(path: str) -> str:
    """Create the directory 0700 if needed; refuse one owned by someone else or open to others."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise CollectorError(f"cannot create the agent directory {path}: {exc}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise CollectorError(f"agent directory {path} is not a directory (a symlink?)")
    if info.st_uid != os.getuid():
        raise CollectorError(
            f"agent directory {path} belongs to uid {info.st_uid}, not to you ({os.getuid()})"
        )
    if info.st_mode & 0o077:
        try:
            os.chmod(path, 0o700)  # ours but too open (an old umask): tighten it rather than leak
        except OSError as exc:
            raise CollectorError(
                f"agent directory {path} is mode {oct(info.st_mode & 0o777)}: {exc}"
            ) from exc
    return path


def unsafe_dir_reason(path: str) -> str | None:
    """Why the monitor must not read agent files from this directory, or None when it may: it must be a real
    directory (not a symlink) owned by this user and writable by no one else (anyone who can write there can
    plant a ring that shows a fake agent, or swap one under a reader)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None  # no agent has run yet: nothing to read
    except OSError as exc:
        return f"cannot look at the agent directory {path}: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        return f"agent directory {path} is not a directory (a symlink?): not read"
    if info.st_uid != os.getuid():
        return f"agent directory {path} belongs to uid {info.st_uid}, not to you ({os.getuid()}): not read"
    if info.st_mode & 0o022:
        return f"agent directory {path} is mode {oct(info.st_mode & 0o777)}, writable by others: not read"
    return None


def unsafe_file_reason(info: os.stat_result, path: str) -> str | None:
    """Why an agent file (fstat of the open descriptor) must not be read, or None: a regular file of this user
    that no one else can write."""
    if not stat.S_ISREG(info.st_mode):
        return f"{path}: not a regular file, so not an agent file"
    if info.st_uid != os.getuid():
        return f"{path}: belongs to uid {info.st_uid}, not to you ({os.getuid()}): not read"
    if info.st_mode & 0o022:
        return f"{path}: mode {oct(info.st_mode & 0o777)}, writable by others: not read"
    return None


# ------------------------------------------------------------------------------------------ info file
# Beside each ring file, `agent-<pid>-<start>.info.json` (0600): one JSON document the agent rewrites
# atomically (a temporary file renamed over it) when its content changed, at most every 0.2 s: the tracked
# models' config / dtype / bytes, the caches' batch and tokens, the prefill/decode phase peaks and the
# automatic-tracking hooks' status (collectors/agent.py Agent.info; read by collectors/agent_info.py). The
# ring keeps its fixed-size records; this file carries what does not fit a fixed record.
INFO_VERSION = 1
INFO_SUFFIX = ".info.json"
INFO_MAX_BYTES = 1 << 20


def info_file_path(ring_path: str) -> str:
    base = ring_path[: -len(".ring")] if ring_path.endswith(".ring") else ring_path
    return base + INFO_SUFFIX


def write_info_file(path: str, text: str) -> None:
    """Write `text` to path atomically, 0600 (a reader sees the old or the new document, never half)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, text.encode("utf-8", "replace"))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def ring_file_name(pid: int, start_ticks: int) -> str:
    return f"agent-{pid}-{start_ticks}.ring"


def parse_ring_file_name(name: str) -> tuple[int, int] | None:
    if not (name.startswith("agent-") and name.endswith(".ring")):
        return None
    parts = name[len("agent-") : -len(".ring")].split("-")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def process_start_ticks(pid: int, proc_root: str = "/proc") -> int | None:
    """starttime (field 22 of /proc/<pid>/stat), None if the process is gone."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), encoding="utf-8", errors="replace") as f:
            text = f.read()
        return int(text[text.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None
