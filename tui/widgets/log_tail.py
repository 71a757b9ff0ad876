"""The last lines of the `memsight run` child's log file, read on the app's timer.

`LogTail` reads only what was appended since the last call, and at most `max_read_bytes` of it (a child that
writes megabytes per second costs a bounded read per tick, never a read of the whole file); it keeps the last
`max_lines` complete lines. The widget is a plain Static: the app hands it the lines, it never reads files.
"""

from __future__ import annotations

import os
import pathlib
from collections import deque

from rich.text import Text
from textual.widgets import Static

MAX_READ_BYTES = 64 * 1024  # per tick: more than any terminal panel shows
MAX_LINE_CHARS = 400  # a line without a newline for this long is shown cut (progress bars, binary output)


class LogTail:
    """Follows one file: `read_new()` returns the last lines, reading only the bytes appended since the
    previous call (bounded). A file not created yet reads as no lines; a file that shrank starts over."""

    def __init__(self, path: str | os.PathLike, max_lines: int = 50, max_read_bytes: int = MAX_READ_BYTES):
        self.path = pathlib.Path(path)
        self.max_lines = max_lines
        self.max_read_bytes = max_read_bytes
        self.offset = 0
        self.skipped_bytes = 0  # bytes jumped over because more than max_read_bytes arrived in one tick
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._partial = ""
        self.error = ""

    @property
    def lines(self) -> tuple[str, ...]:
        """Complete lines, then the unfinished last line (a prompt, a progress bar) if any."""
        lines = (*self._lines, self._partial) if self._partial else tuple(self._lines)
        return lines[-self.max_lines :]

    def read_new(self) -> tuple[str, ...]:
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:  # truncated or replaced: start over
                    self.offset = 0
                    self._lines.clear()
                    self._partial = ""
                if size - self.offset > self.max_read_bytes:
                    self.skipped_bytes += size - self.max_read_bytes - self.offset
                    self.offset = size - self.max_read_bytes
                    self._partial = ""  # the jump lands mid-line: drop the first, partial line
                    drop_first = True
                else:
                    drop_first = False
                f.seek(self.offset)
                data = f.read(size - self.offset)
        except FileNotFoundError:
            return self.lines
        except OSError as exc:
            self.error = f"cannot read {self.path}: {exc}"
            return self.lines
        self.error = ""
        self.offset += len(data)
        text = self._partial + data.decode("utf-8", errors="replace")
        pieces = text.split("\n")
        if drop_first:
            pieces = pieces[1:] or [""]
        self._partial = pieces.pop()[-MAX_LINE_CHARS:]
        for line in pieces:
            # a carriage return redraws a line (progress bars): keep what is shown last
            self._lines.append(line.rstrip("\r").rsplit("\r", 1)[-1][:MAX_LINE_CHARS])
        return self.lines


class LogPanel(Static):
    """A few lines of the child's output under a title that says where the whole log is."""

    DEFAULT_CSS = """
    LogPanel { height: 8; min-height: 3; border: round $primary 50%; padding: 0 1; overflow: hidden; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._lines: tuple[str, ...] = ()
        self._title = ""

    @property
    def shown(self) -> tuple[str, ...]:
        return self._lines

    def update_lines(self, title: str, lines: tuple[str, ...]) -> bool:
        if title == self._title and lines == self._lines:
            return False
        self._title = title
        self._lines = lines
        self.border_title = title
        rows = max(1, self.size.height - 2) if self.size.height else len(lines)
        shown = lines[-rows:] if lines else ()
        self.update(Text("\n".join(shown), no_wrap=True, overflow="ellipsis") if shown else Text(
            "(no output yet)", style="grey62"
        ))
        return True

    def on_resize(self) -> None:
        title, lines = self._title, self._lines
        self._title = "\0"  # force a redraw with the new number of rows
        self.update_lines(title, lines)
