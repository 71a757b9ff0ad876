"""Measured buckets drawn directly above the plan's, on the same scale, with GiB figures and differences."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text
from textual.widget import Widget

from tui.widgets.data import (
    BUCKET_FILL,
    BUCKET_LABELS,
    BUCKET_STYLES,
    MEASURED_KEYS,
    BucketComparison,
    Segment,
)
from tui.widgets.fmt import gib, gib_num, shown, signed_gib, split_cells

LABEL_WIDTH = 10  # "measured  " / "plan      "


def stacked_bar(segments: tuple[Segment, ...], cells: int, scale: int) -> Text:
    """A bar of `cells` characters where each segment's width is proportional to its bytes over `scale`."""
    values = [max(seg.bytes or 0, 0) for seg in segments]
    widths = split_cells(values, cells, scale)
    bar = Text()
    for seg, width in zip(segments, widths, strict=True):
        if width:
            bar.append(BUCKET_FILL[seg.key] * width, style=BUCKET_STYLES[seg.key])
    if bar.cell_len < cells:  # the part of the scale no known bucket covers (unknown bucket, shorter bar)
        bar.append(" " * (cells - bar.cell_len))
    return bar


def comparison_rows(data: BucketComparison) -> list[tuple[str, int | None, int | None, int | None]]:
    """(bucket key, measured, planned, measured − planned). The plan's overhead is compared with the
    measured allocator gap + non-PyTorch together, since the plan does not split it; "other procs / OS" has no
    difference when the plan's reserve is that measured figure."""
    rows: list[tuple[str, int | None, int | None, int | None]] = []
    for key in MEASURED_KEYS:
        measured = data.measured_bytes(key)
        if key == "gap":
            rows.append((key, measured, None, None))
            continue
        if key == "nonpytorch":
            gap = data.measured_bytes("gap")
            overhead_measured = None if measured is None and gap is None else (measured or 0) + (gap or 0)
            planned = data.planned_bytes("overhead")
            diff = None if overhead_measured is None or planned is None else overhead_measured - planned
            rows.append((key, measured, None, None))
            rows.append(("overhead", overhead_measured, planned, diff))
            continue
        planned = data.planned_bytes(key)
        diff = None if measured is None or planned is None else measured - planned
        if key == "other" and data.other_planned_as_measured:
            diff = None  # the same figure on both sides: a difference would always read ±0.00
        rows.append((key, measured, planned, diff))
    return rows


def _signature(data: BucketComparison | None) -> tuple | None:
    if data is None:
        return None
    planned = tuple((s.key, shown(s.bytes)) for s in data.planned) if data.planned else None
    return (
        data.title,
        data.plan_label,
        data.missing,
        data.notes,
        shown(data.capacity_bytes),
        tuple((s.key, shown(s.bytes)) for s in data.measured),
        planned,
    )


def _shape(data: BucketComparison) -> tuple:
    return (data.planned is None, bool(data.missing), len(data.measured), len(data.notes))


class BucketBars(Widget):
    """Renders one BucketComparison. Redraws only when given a different value (or resized)."""

    DEFAULT_CSS = """
    BucketBars { height: auto; padding: 0 1; margin-bottom: 1; }
    """

    def __init__(self, data: BucketComparison | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self._data = data

    @property
    def data(self) -> BucketComparison | None:
        return self._data

    def update_data(self, data: BucketComparison) -> bool:
        """Show `data`; returns whether the picture changed (and so whether a redraw was requested).
        Byte changes below display resolution are kept but not redrawn."""
        if data == self._data:
            return False
        previous = self._data
        self._data = data
        if _signature(data) == _signature(previous):
            return False
        # a new layout only when the widget's height can change (a line appears or goes)
        self.refresh(layout=previous is None or _shape(previous) != _shape(data))
        return True

    def scale_bytes(self) -> int:
        data = self._data
        if data is None:
            return 0
        totals = [data.capacity_bytes or 0, sum(s.bytes or 0 for s in data.measured)]
        if data.planned:
            totals.append(sum(s.bytes or 0 for s in data.planned))
        return max(totals)

    def render(self) -> RenderableType:
        data = self._data
        if data is None:
            return Text("waiting for the first sample…", style="italic")
        width = max(self.size.width, 20)
        cells = max(width - LABEL_WIDTH, 10)
        scale = self.scale_bytes()
        head = Text()
        head.append(data.title, style="bold")
        head.append(f"   scale {gib(scale)}", style="grey62")
        lines: list[RenderableType] = [head]
        measured_line = Text("measured  ", style="bold")
        measured_line.append_text(stacked_bar(data.measured, cells, scale))
        lines.append(measured_line)
        plan_line = Text("plan      ", style="bold")
        if data.planned:
            plan_line.append_text(stacked_bar(data.planned, cells, scale))
        else:
            plan_line.append("no plan: ", style="yellow")
            plan_line.append(data.plan_label)
        lines.append(plan_line)
        if data.planned:
            lines.append(Text(f"plan: {data.plan_label}", style="grey62", overflow="ellipsis", no_wrap=True))
        for note in data.notes:
            lines.append(Text(note, style="grey62", overflow="ellipsis", no_wrap=True))
        if data.missing:
            lines.append(Text(data.missing, style="yellow", overflow="ellipsis", no_wrap=True))
        lines.append(self._table(data))
        return Group(*lines)

    def _table(self, data: BucketComparison) -> Text:
        """Fixed-width columns as one Text (a Rich Table costs several times more to lay out each tick)."""
        table = Text(no_wrap=True, overflow="ellipsis")
        table.append(f"{'bucket':<20}{'measured GiB':>13}{'plan GiB':>10}{'diff GiB':>10}", style="bold")
        for key, measured, planned, diff in comparison_rows(data):
            table.append("\n")
            if key == "overhead":
                table.append(f"{'  = overhead':<20}", style="italic")
            else:
                table.append(BUCKET_FILL[key], style=BUCKET_STYLES[key])
                table.append(f" {BUCKET_LABELS[key]:<19}")
            table.append(f"{gib_num(measured, 2):>13}{gib_num(planned, 2):>10}")
            diff_style = "" if diff is None or abs(diff) < 2**28 else ("red" if diff > 0 else "cyan")
            table.append(f"{signed_gib(diff, 2):>10}", style=diff_style)
        return table
