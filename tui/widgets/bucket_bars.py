"""Measured buckets drawn directly above the plan's, on the same scale, with figures and differences in the
table's own unit (KiB, MiB or GiB: fmt.unit_for)."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Region
from textual.widget import Widget

from tui.widgets.data import (
    BUCKET_FILL,
    BUCKET_LABELS,
    BUCKET_STYLES,
    MEASURED_KEYS,
    BucketComparison,
    Segment,
)
from tui.widgets.fmt import Unit, figure, places, shown, signed_figure, size, split_cells, unit_for
from tui.widgets.lines import LineCache, LinePicture, line_key

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
    drawn = {s.key for s in data.measured}
    for key in MEASURED_KEYS:
        if key not in drawn:
            continue  # a bucket this pool has no row for ("process" on a GPU, "tensors" on the CPU)
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


# the machine's rows: their size says nothing of the model's, so they do not choose the table's unit
MACHINE_ROWS = frozenset({"other", "free"})


def table_unit(rows: list[tuple[str, int | None, int | None, int | None]]) -> Unit:
    """The unit of a comparison table: the model's own rows (weights, KV, ...) choose it, so a tiny model's
    figures carry three significant digits instead of reading 0.00 GiB."""
    model_rows = [row for row in rows if row[0] not in MACHINE_ROWS]
    return unit_for(v for _, measured, planned, _ in model_rows for v in (measured, planned))


def table_cells(data: BucketComparison) -> tuple[Unit, tuple[tuple[str, int | None, str, str, str], ...]]:
    """(unit, ((bucket key, difference in bytes, measured, planned, difference) as written, ...)); the
    difference is written at the decimals of the figures it compares."""
    rows = comparison_rows(data)
    unit = table_unit(rows)
    cells = []
    for key, measured, planned, diff in rows:
        decimals = 0
        if diff is not None:
            decimals = max(places(v / unit.bytes) for v in (measured, planned) if v is not None)
        written = (figure(measured, unit), figure(planned, unit), signed_figure(diff, unit, decimals))
        cells.append((key, diff, *written))
    return unit, tuple(cells)


def _signature(data: BucketComparison | None) -> tuple | None:
    """What the widget draws, at the resolution it draws it: bars at a cell's, figures as written."""
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
        table_cells(data),
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
        self._shown = _signature(data)  # of what is drawn: computed once per value, not again at each tick
        self._lines = LineCache()  # the strips of the lines drawn: only changed lines are drawn again
        self._made: tuple[BucketComparison, int, list[Text]] | None = None  # (data, width, its lines)
        self._drawn: tuple[int, list[tuple]] | None = None  # (width, line_key of each line) last rendered

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
        signature = _signature(data)
        if signature == self._shown:
            return False
        self._shown = signature
        # a new layout only when the widget's height can change (a line appears or goes)
        if previous is None or _shape(previous) != _shape(data):
            self.refresh(layout=True)
        else:
            self.refresh(*self._changed_rows(data))  # none known: the whole widget
        return True

    def _changed_rows(self, data: BucketComparison) -> list[Region]:
        """The rows whose line differs from the one drawn there last, when every line is one row high (a tick
        that moved one figure redraws its row and the bar, not 13 lines); [] when that is not known."""
        if self._drawn is None or self._drawn[0] != self.size.width:
            return []
        width = self.size.width
        lines = self._lines_for(data, width)
        drawn = self._drawn[1]
        if len(lines) != len(drawn) or any(not line.no_wrap and line.cell_len > width for line in lines):
            return []
        return [Region(0, y, width, 1) for y, line in enumerate(lines) if line_key(line) != drawn[y]]

    def scale_bytes(self, data: BucketComparison | None = None) -> int:
        data = data or self._data
        if data is None:
            return 0
        totals = [data.capacity_bytes or 0, sum(s.bytes or 0 for s in data.measured)]
        if data.planned:
            totals.append(sum(s.bytes or 0 for s in data.planned))
        return max(totals)

    def render(self) -> Text | LinePicture:
        data = self._data
        if data is None:
            return Text("waiting for the first sample…", style="italic")
        lines = self._lines_for(data, self.size.width)
        self._drawn = (self.size.width, [line_key(line) for line in lines])
        return LinePicture(self, lines, self._lines)

    def _lines_for(self, data: BucketComparison, width: int) -> list[Text]:
        """The picture's lines for `data` at `width` (made once for both _changed_rows and render)."""
        if self._made is not None and self._made[0] is data and self._made[1] == width:
            return self._made[2]
        width = max(width, 20)
        cells = max(width - LABEL_WIDTH, 10)
        scale = self.scale_bytes(data)
        head = Text()
        head.append(data.title, style="bold")
        head.append(f"   scale {size(scale)}", style="grey62")
        lines: list[Text] = [head]
        measured_line = Text("measured  ", style="bold")
        measured_line.append_text(stacked_bar(data.measured, cells, scale))
        lines.append(measured_line)
        plan_line = Text("plan      ", style="bold")
        if data.planned:
            plan_line.append_text(stacked_bar(data.planned, cells, scale))
        else:  # one line, as the bar it stands for (the reason is also the row's whole plan label)
            plan_line.append("no plan: ", style="yellow")
            plan_line.append(data.plan_label)
            plan_line.no_wrap, plan_line.overflow = True, "ellipsis"
        lines.append(plan_line)
        if data.planned:
            lines.append(Text(f"plan: {data.plan_label}", style="grey62", overflow="ellipsis", no_wrap=True))
        for note in data.notes:
            lines.append(Text(note, style="grey62", overflow="ellipsis", no_wrap=True))
        if data.missing:
            lines.append(Text(data.missing, style="yellow", overflow="ellipsis", no_wrap=True))
        lines.extend(self._table(data).split("\n"))  # a row at a time: the rows whose figures changed
        self._made = (data, self.size.width, lines)
        return lines

    def _table(self, data: BucketComparison) -> Text:
        """Fixed-width columns as one Text (a Rich Table costs several times more to lay out each tick)."""
        unit, cells = table_cells(data)
        table = Text(no_wrap=True, overflow="ellipsis")
        u = unit.name
        table.append(f"{'bucket':<20}{'measured ' + u:>13}{'plan ' + u:>10}{'diff ' + u:>10}", style="bold")
        for key, diff, measured, planned, difference in cells:
            table.append("\n")
            if key == "overhead":
                table.append(f"{'  = overhead':<20}", style="italic")
            else:
                table.append(BUCKET_FILL[key], style=BUCKET_STYLES[key])
                table.append(f" {BUCKET_LABELS[key]:<19}")
            table.append(f"{measured:>13}{planned:>10}")
            diff_style = "" if diff is None or abs(diff) < 2**28 else ("red" if diff > 0 else "cyan")
            table.append(f"{difference:>10}", style=diff_style)
        return table
