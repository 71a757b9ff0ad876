"""The flight recorder: a bounded rolling recording, so a host that hangs leaves its last minutes on disk.

`memsight run` keeps one by default (tui/cmd_run.py). It is built on the Recorder's public interface only: a
directory of segment files (`segment-000001.jsonl`, ...), each a complete recording written by its own
Recorder. When the current segment passes `segment_bytes` the next one starts; when the segments together
pass `limit_bytes` the oldest are deleted. Every `sync_interval_s` (2 s) the current segment is flushed and
fsync'ed, so a SIGKILL of memsight, a kernel OOM kill or a hard reset loses at most the last seconds.

A new segment starts with what a reader needs from before it (the Recorder writes these only on change):
the last NVML snapshot, vLLM and engine scrapes, engine log figures, pool detail, scope and each agent's
info are written again at its top.

`read_flight(dir)` reads the kept segments back as one Recording (collectors/recorder.py), and
`flight_end(dir)` says where it ends: the last sample's time and whether the run closed the recording
(a summary line) or stopped without closing it.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collectors.errors import CollectorError
from collectors.recorder import Recorder, Recording, read_recording
from planner.units import size_text

SEGMENT_GLOB = "segment-*.jsonl"
DEFAULT_LIMIT_BYTES = 64 * 2**20  # the whole flight recording (stated in `memsight run --help`)
SEGMENTS = 8  # the limit is kept in this many segments: deleting one loses an eighth of the history
SYNC_INTERVAL_S = 2.0
# the methods whose last call a new segment repeats at its top (the Recorder writes them only on change),
# with the arguments that tell one stream from another (agent_info: one per agent)
_STICKY: dict[str, Callable[[tuple], tuple]] = {
    "nvml": lambda args: (),
    "vllm": lambda args: (),
    "pool": lambda args: (),
    "engine": lambda args: (),
    "engine_log": lambda args: (),
    "scope": lambda args: (),
    "agent_info": lambda args: (args[0], args[1]),
}


def segment_name(index: int) -> str:
    return f"segment-{index:06d}.jsonl"


def segments(directory: str | os.PathLike) -> list[pathlib.Path]:
    """The segment files of a flight recording, oldest first."""
    return sorted(pathlib.Path(directory).glob(SEGMENT_GLOB))


class FlightRecorder:
    """A Recorder that rolls over segment files in `directory`, bounded by `limit_bytes` in all; every
    Recorder method goes to the current segment's Recorder (the Monitor calls it under its record lock)."""

    def __init__(
        self,
        directory: str | os.PathLike,
        hz: float = 0.0,
        limit_bytes: int = DEFAULT_LIMIT_BYTES,
        sync_interval_s: float = SYNC_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit_bytes < 2**20:
            raise CollectorError(f"the flight recording needs at least 1 MiB, got {limit_bytes} bytes")
        self.directory = pathlib.Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # command lines are in it
        except OSError as exc:
            raise CollectorError(f"cannot make the flight recording's {self.directory}: {exc}") from exc
        if segments(self.directory):
            raise CollectorError(f"{self.directory} already holds a flight recording: give a new directory")
        self.hz = hz
        self.limit_bytes = limit_bytes
        self.segment_bytes = limit_bytes // SEGMENTS
        self.sync_interval_s = sync_interval_s
        self._clock = clock
        self._index = 0
        self._sticky: dict[tuple, tuple[str, tuple, dict]] = {}
        self._current = self._open_next()
        self._synced = clock()
        self.rotations = 0
        self.deleted = 0  # segments removed to keep within limit_bytes

    # ---- what the Monitor reads of a recorder
    @property
    def path(self) -> str:
        return str(self.directory)

    @property
    def failed(self) -> str | None:
        return self._current.failed

    @property
    def lines(self) -> int:
        return self._current.lines

    def __getattr__(self, name: str) -> Any:
        """Recorder's record methods (os, nvml, agent, alert, summary, ...), then the rolling."""
        if name.startswith("_"):
            raise AttributeError(name)  # never this object's own state (not set yet in __init__)
        method = getattr(self._current, name)
        if not callable(method):
            return method

        def record(*args: Any, **kwargs: Any) -> Any:
            result = getattr(self._current, name)(*args, **kwargs)
            if name in _STICKY:
                self._sticky[(name, *_STICKY[name](args))] = (name, args, kwargs)
            self._after_write()
            return result

        return record

    def flush(self) -> None:
        self._sync()

    def close(self) -> None:
        self._current.close()
        self._fsync(self._current.path)

    # ---- rolling
    def _open_next(self) -> Recorder:
        self._index += 1
        recorder = Recorder(self.directory / segment_name(self._index), hz=self.hz)
        for name, args, kwargs in self._sticky.values():  # what the reader needs from before this segment
            getattr(recorder, name)(*args, **kwargs)
        recorder.flush()  # the header on disk at once: a segment on disk is always a readable recording
        return recorder

    def _after_write(self) -> None:
        if self._current.failed is not None:
            return  # the Recorder said why; the Monitor shows it
        if self._clock() - self._synced >= self.sync_interval_s:
            self._sync()
        try:
            size = os.path.getsize(self._current.path)
        except OSError:
            return
        if size >= self.segment_bytes:
            self._rotate()

    def _sync(self) -> None:
        self._current.flush()
        self._fsync(self._current.path)
        self._synced = self._clock()

    @staticmethod
    def _fsync(path: str) -> None:
        """Flush the file's pages to the disk: what the page cache holds is lost if the host goes down."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass  # a file system without fsync (some FUSE): flushed to the kernel is what we can do
        finally:
            os.close(fd)

    def _rotate(self) -> None:
        old = self._current
        old.close()
        self._fsync(old.path)
        self._current = self._open_next()
        self.rotations += 1
        kept = segments(self.directory)
        total = sum(p.stat().st_size for p in kept)
        for oldest in kept[:-1]:
            if total <= self.limit_bytes:
                break
            total -= oldest.stat().st_size
            oldest.unlink()
            self.deleted += 1


# ------------------------------------------------------------------------------------------ where runs go
KEEP_RUNS = 10  # `memsight run` keeps the flight recordings of its last runs, deleting older ones


def flight_root(environ: dict[str, str] | None = None) -> pathlib.Path:
    """$XDG_STATE_HOME/memsight/flight (default ~/.local/state/memsight/flight)."""
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return pathlib.Path(state) / "memsight" / "flight"


def new_run_dir(root: pathlib.Path, keep: int = KEEP_RUNS, now: float | None = None) -> pathlib.Path:
    """A fresh directory for this run's flight recording under `root` (run-YYYYmmdd-HHMMSS-PID), after
    deleting the oldest runs' recordings beyond the newest keep - 1."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    runs = sorted((p for p in root.glob("run-*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for old in runs[: max(0, len(runs) - (keep - 1))]:
        for f in old.glob(SEGMENT_GLOB):
            f.unlink(missing_ok=True)
        try:
            old.rmdir()
        except OSError:
            pass  # something else in it: not ours to delete
    return root / f"run-{stamp}-{os.getpid()}"


# ------------------------------------------------------------------------------------------ reading
def read_flight(directory: str | os.PathLike) -> Recording:
    """The kept segments as one Recording: the first segment's header, every segment's events in order."""
    files = segments(directory)
    if not files:
        raise CollectorError(f"{directory}: no flight recording segments ({SEGMENT_GLOB}) in it")
    parts = []
    for path in files:
        try:
            parts.append(read_recording(path))
        except CollectorError:
            if path != files[-1]:
                raise
            # the newest segment can be empty or headless when memsight died just as it opened it
    if not parts:
        raise CollectorError(f"{directory}: its only segment holds nothing yet")
    events = tuple(e for part in parts for e in part.events)
    first_bad = next((p.first_bad for p in parts if p.first_bad), "")
    return Recording(
        header=parts[0].header,
        events=events,
        bad_lines=sum(p.bad_lines for p in parts),
        truncated_tail=parts[-1].truncated_tail,
        first_bad=first_bad,
    )


def joined_file(directory: str | os.PathLike) -> pathlib.Path:
    """The kept segments as one recording file, for the readers that stream a file (replay, replay --json):
    the first segment's header, then every segment's lines after its own header, in order. Each segment
    starts with full lines (a new Recorder writes its first OS, NVML and agent lines whole), so the joined
    file decodes as one recording. Written to a private temporary directory removed when memsight exits."""
    import atexit  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    files = segments(directory)
    if not files:
        raise CollectorError(f"{directory}: no flight recording segments ({SEGMENT_GLOB}) in it")
    folder = pathlib.Path(tempfile.mkdtemp(prefix="memsight-flight-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    out_path = folder / "joined.jsonl"
    with open(out_path, "wb") as out:
        for i, path in enumerate(files):
            with open(path, "rb") as segment:
                first = segment.readline()
                if i == 0:
                    out.write(first)
                elif not first.strip():
                    continue  # the newest segment, opened just as memsight died: nothing in it
                rest = segment.read()
            out.write(rest)
            if rest and not rest.endswith(b"\n") and path != files[-1]:
                out.write(b"\n")  # a cut line ends where its segment ended, not inside the next one's first
    return out_path


@dataclass(frozen=True, slots=True)
class FlightEnd:
    """Where a flight recording ends."""

    first_t: float | None  # the first sample it still holds (older segments may have been deleted)
    last_t: float | None  # the last sample that reached the disk
    closed: bool  # the run closed it (its summary is the last line); False: memsight or the host stopped
    segments: int
    bytes: int

    def sentence(self) -> str:
        if self.last_t is None:
            return "it holds no sample"
        span = f"{_clock(self.first_t)} to {_clock(self.last_t)} ({self.last_t - self.first_t:.0f} s)"
        size = f"{self.segments} segment(s), {size_text(self.bytes)}"
        if self.closed:
            return f"{span}, closed by the run ({size})"
        return (
            f"{span}, then nothing: memsight stopped without closing it (killed, or the host went down) "
            f"at {_clock(self.last_t)} or within the 2 s after ({size})"
        )


def _clock(t: float | None) -> str:
    return "?" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def flight_end(directory: str | os.PathLike, recording: Recording | None = None) -> FlightEnd:
    recording = recording if recording is not None else read_flight(directory)
    times = [e["t"] for e in recording.events if e.get("k") == "os" and isinstance(e.get("t"), int | float)]
    files = segments(directory)
    return FlightEnd(
        first_t=min(times) if times else None,
        last_t=max(times) if times else None,
        closed=bool(recording.events) and recording.events[-1].get("k") == "summary",
        segments=len(files),
        bytes=sum(p.stat().st_size for p in files),
    )
