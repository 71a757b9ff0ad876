"""A serving engine's own memory numbers, read from its log as it streams (the `memsight run` child's log).

LogFollower reads only the bytes appended since the previous poll (at most max_read_bytes per poll; the rest
is read on the next polls, nothing is skipped) and hands on whole UTF-8 text; a file that shrinks was
truncated or replaced, and is read again from its start. EngineLogFollower puts it in front of the engines'
own log readers (planner/engines): it keeps the first RECOGNIZE_BYTES of text until one engine recognizes it
(vLLM, SGLang, llama.cpp, Ollama: planner.engines.recognize), then feeds everything to that engine's
incremental reader, and `poll()` answers what the log says so far with the engine's buckets
(planner.engines.base.LiveBuckets). Never raises on file trouble: a missing file reads as nothing yet, a read
error is kept in `error`.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass
from typing import Any

MAX_READ_BYTES = 1 << 20  # per poll: a startup log is a few hundred KB; a chatty server catches up over polls
RECOGNIZE_BYTES = 256 << 10  # an engine names itself in its first lines; past this the log is no engine's


class LogFollower:
    """The text appended to a file since the last read, in whole UTF-8 characters."""

    def __init__(self, path: str | os.PathLike, max_read_bytes: int = MAX_READ_BYTES) -> None:
        self.path = pathlib.Path(path)
        self.max_read_bytes = max_read_bytes
        self.offset = 0
        self.error = ""
        self._tail = b""  # bytes of a UTF-8 character cut by the read limit

    def read_new(self) -> tuple[str, bool]:
        """(new text, whether the file was truncated or replaced since the last read: start over)."""
        restarted = False
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:
                    self.offset, self._tail, restarted = 0, b"", True
                f.seek(self.offset)
                data = f.read(min(size - self.offset, self.max_read_bytes))
        except FileNotFoundError:
            data = b""
        except OSError as exc:
            self.error = f"cannot read {self.path}: {exc.strerror or exc}"
            return "", restarted
        self.error = ""
        if not data:
            return "", restarted
        self.offset += len(data)
        data = self._tail + data
        cut = complete_utf8(data)
        self._tail = data[cut:]
        return data[:cut].decode("utf-8", errors="replace"), restarted


def complete_utf8(data: bytes) -> int:
    """Length of the prefix of data that does not end inside a multi-byte UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


@dataclass(frozen=True, slots=True)
class FollowedLog:
    """What a followed log says so far: the engine that wrote it, its parsed log, and its buckets."""

    engine: str  # the registry name ("vllm", "sglang", "llamacpp", "ollama")
    title: str  # how a person names it ("SGLang")
    log: Any  # the engine's own log type
    buckets: Any  # planner.engines.base.LiveBuckets, or None when the engine has none yet


class EngineLogFollower:
    """Follows one log file; `poll()` is None until an engine recognizes the log, then a FollowedLog (the same
    object as last time when nothing new arrived). `unrecognized` says when the log is no engine's."""

    def __init__(
        self,
        path: str | os.PathLike,
        max_read_bytes: int = MAX_READ_BYTES,
        engines: tuple[str, ...] | None = None,
    ) -> None:
        self._file = LogFollower(path, max_read_bytes)
        self._engines = engines
        self._engine: Any = None
        self._reader: Any = None
        self._head = ""
        self._result: FollowedLog | None = None
        self.unrecognized = False

    @property
    def path(self) -> pathlib.Path:
        return self._file.path

    @property
    def error(self) -> str:
        return self._file.error

    def poll(self) -> FollowedLog | None:
        text, restarted = self._file.read_new()
        if restarted:
            self._engine = self._reader = self._result = None
            self._head, self.unrecognized = "", False
        if not text:
            return self._result
        if self._engine is None:
            self._head += text
            self._recognize()
            if self._engine is None:
                return None
            text, self._head = self._head, ""
        self._reader.feed_text(text)
        log = self._reader.result()
        self._result = FollowedLog(self._engine.name, self._engine.title, log, self._engine.live_buckets(log))
        return self._result

    def _recognize(self) -> None:
        from planner.engines import engine_names, get_engine  # noqa: PLC0415  (the planner parses)

        if self.unrecognized:
            return
        wanted = engine_names() if self._engines is None else self._engines
        names = [name for name in wanted if name in engine_names()]  # llama.cpp's, once it is registered
        engine = next((e for e in map(get_engine, names) if e.recognizes(self._head)), None)
        if engine is not None:
            self._engine, self._reader = engine, engine.new_reader()
        elif len(self._head) > RECOGNIZE_BYTES:
            self.unrecognized, self._head = True, ""
