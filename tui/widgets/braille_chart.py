"""A line chart drawn in braille cells (two dots across, four down per character), with a frame, y ticks on
the left, time ticks below, a title and a legend: the Live screen's gap chart.

Pure arithmetic on characters, no Textual and no plotext: the Live screen draws this chart all day, and
plotext (its figure, its documentation tables, its date module) cost 2.0 MiB of the Live screen's resident
memory for it (bench/live_memory.py, issue 20). The lab's roofline plot, drawn on demand, still uses plotext.

`chart_rows` returns the picture as rows of runs: (characters, colour name or None for the default)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

BRAILLE_BLANK = 0x2800
# the bit of the dot at (row dy, column dx) of a braille cell, dy 0 the top (Unicode's dot numbering)
DOT_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
LEGEND_MARK = "⠤⠤"
# rows of the picture that are not the canvas: the title, the frame's top and bottom, the time labels
CHROME_ROWS = 4

Run = tuple[str, str | None]


@dataclass(frozen=True)
class ChartLine:
    values: Sequence[float]
    label: str
    color: str


def nice_ticks(low: float, high: float, most: int) -> list[float]:
    """At most `most` evenly spaced round values (1, 2 or 5 times a power of ten apart) within [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low or most < 1:
        return [low] if math.isfinite(low) else []
    raw = (high - low) / most
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))  # 0.6 / 3 is 0.2
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def tick_label(value: float, ticks: Sequence[float]) -> str:
    """The value with as many decimals as the ticks' spacing needs (0 for whole steps)."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    decimals = next((d for d in range(7) if abs(round(step, d) - step) <= 1e-9 * max(1.0, step)), 6)
    return f"{value:.{decimals}f}"


class _Canvas:
    """Braille dots with a colour per cell (the last line drawn in a cell colours it)."""

    def __init__(self, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows
        self.bits = [[0] * cols for _ in range(rows)]
        self.colors: list[list[str | None]] = [[None] * cols for _ in range(rows)]

    def dot(self, x: int, y: int, color: str) -> None:
        if 0 <= x < 2 * self.cols and 0 <= y < 4 * self.rows:
            row, col = y // 4, x // 2
            self.bits[row][col] |= DOT_BITS[y % 4][x % 2]
            self.colors[row][col] = color

    def segment(self, x0: int, y0: int, x1: int, y1: int, color: str) -> None:
        """Bresenham's line between two dots, both ends drawn."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            self.dot(x0, y0, color)
            if x0 == x1 and y0 == y1:
                return
            twice = 2 * err
            if twice >= dy:
                err += dy
                x0 += sx
            if twice <= dx:
                err += dx
                y0 += sy

    def cells(self, row: int) -> list[tuple[str, str | None]]:
        return [
            (chr(BRAILLE_BLANK + bits) if bits else " ", color if bits else None)
            for bits, color in zip(self.bits[row], self.colors[row], strict=True)
        ]


def chart_rows(
    width: int,
    height: int,
    title: str,
    t: Sequence[float],
    lines: Sequence[ChartLine],
    y_low: float,
    y_high: float,
) -> list[list[Run]]:
    """The chart, `height` rows of exactly `width` characters each (a picture that fits is never cropped)."""
    if width < 1 or height < 1:
        return []
    rows: list[list[Run]] = [[(title[:width].center(width), None)]]
    canvas_rows = height - CHROME_ROWS
    if canvas_rows < 1 or width < 12:
        return rows + [[(" " * width, None)] for _ in range(height - 1)]
    if not y_high > y_low:
        y_high = y_low + 1.0
    y_ticks = nice_ticks(y_low, y_high, max(1, min(6, canvas_rows // 2)))
    y_labels = [tick_label(v, y_ticks) for v in y_ticks]
    margin = max((len(label) for label in y_labels), default=0) + 1  # the labels, then the frame's side
    cols = width - margin - 1  # inside the frame
    if cols < 4:
        return rows + [[(" " * width, None)] for _ in range(height - 1)]
    canvas = _Canvas(cols, canvas_rows)
    t0, t1 = (t[0], t[-1]) if t else (0.0, 1.0)
    span_t = t1 - t0 if t1 > t0 else 1.0
    dots_x, dots_y = 2 * cols - 1, 4 * canvas_rows - 1

    def dot_y(value: float) -> int:
        return round((y_high - value) / (y_high - y_low) * dots_y)

    for line in lines:
        _draw_line(canvas, line, t, lambda when: round((when - t0) / span_t * dots_x), dot_y)
    tick_rows = {
        min(canvas_rows - 1, max(0, dot_y(v) // 4)): label for v, label in zip(y_ticks, y_labels, strict=True)
    }
    x_ticks = nice_ticks(t0, t0 + span_t, max(1, min(10, cols // 8)))
    x_cols = {min(cols - 1, round((v - t0) / span_t * dots_x) // 2): v for v in x_ticks}
    legend = [(i, line) for i, line in enumerate(lines) if line.label][:canvas_rows]
    rows += _framed(canvas, tick_rows, legend, margin)
    pad = " " * (margin - 1)
    rows.append([(pad + "└" + "".join("┬" if c in x_cols else "─" for c in range(cols)) + "┘", None)])
    rows.append([(_time_labels(x_cols, x_ticks, margin, width), None)])
    return rows


def _draw_line(canvas: _Canvas, line: ChartLine, t: Sequence[float], dot_x, dot_y) -> None:
    """One line's points joined on the canvas (dot_x, dot_y: a time, a value to the canvas's dots); a NaN
    value is a gap in the line."""
    previous = None
    for when, value in zip(t, line.values, strict=False):
        if value != value:
            previous = None
            continue
        here = (dot_x(when), dot_y(value))
        if previous is None:
            canvas.dot(*here, line.color)
        else:
            canvas.segment(*previous, *here, line.color)
        previous = here


def _framed(canvas: _Canvas, tick_rows: dict[int, str], legend: list, margin: int) -> list[list[Run]]:
    """The frame's top and the canvas's rows, each with its y tick's label (or the frame's side) at the left
    and a legend entry written over its first cells where one belongs to that row."""
    cols = canvas.cols
    rows = [[(" " * (margin - 1) + "┌" + "─" * cols + "┐", None)]]
    for row in range(canvas.rows):
        label = tick_rows.get(row)
        left = (label.rjust(margin - 1) + "┤") if label is not None else (" " * (margin - 1) + "│")
        cells = canvas.cells(row)
        for i, line in legend:
            if i == row:
                text = f"{LEGEND_MARK} {line.label}"[: cols - 1]
                cells[1 : 1 + len(text)] = [(c, line.color if k < len(LEGEND_MARK) else None)
                                            for k, c in enumerate(text)]  # fmt: skip
        rows.append(_runs([(left, None), *cells, ("│", None)]))
    return rows


def _time_labels(x_cols: dict[int, float], ticks: Sequence[float], offset: int, width: int) -> str:
    """The time ticks' labels, each centred under its tick, skipped where it would touch the previous one."""
    line = [" "] * width
    end = -1
    for col, value in sorted(x_cols.items()):
        label = tick_label(value, ticks)
        start = max(0, min(width - len(label), offset + col - len(label) // 2))
        if start <= end + 1:
            continue
        line[start : start + len(label)] = label
        end = start + len(label) - 1
    return "".join(line)


def _runs(cells: list[tuple[str, str | None]]) -> list[Run]:
    """Adjacent pieces of one colour joined into one run."""
    runs: list[Run] = []
    for chars, color in cells:
        if runs and runs[-1][1] == color:
            runs[-1] = (runs[-1][0] + chars, color)
        else:
            runs.append((chars, color))
    return runs
