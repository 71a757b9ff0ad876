"""What a process table shows of each process (its cells, style, order and unit), apart from the table
widget: the Live screen's process summary draws them without importing Textual's DataTable (0.3 MiB
resident, for a table the Live screen does not show)."""

from __future__ import annotations

from tui.widgets.data import ProcessRow
from tui.widgets.fmt import GIB_UNIT, Unit, figure, places, shown, signed_figure, unit_for

SORT_KEYS: tuple[str, ...] = ("rss", "gpu", "growth", "pid", "name")


def columns(unit: Unit) -> tuple[str, ...]:
    """The headers, naming the unit the table's figures are in."""
    return ("pid", "command", "user", f"RSS {unit.name}", f"GPU {unit.name}", f"Δ30s {unit.name}", "")


def table_unit(rows) -> Unit:
    """The unit of a process table: the one its largest resident or GPU figure reads at least 1 in."""
    return unit_for(v for r in rows for v in (r.rss, r.gpu_bytes))


def sort_rows(rows: tuple[ProcessRow, ...], key: str) -> list[ProcessRow]:
    """Largest first for sizes (compared at display resolution, so rows showing the same figure keep their
    pid order instead of swapping every tick), ascending for pid and name; unknown sizes last."""
    if key == "pid":
        return sorted(rows, key=lambda r: r.pid)
    if key == "name":
        return sorted(rows, key=lambda r: ((r.command or r.name).lower(), r.pid))
    if key == "gpu":
        return sorted(rows, key=lambda r: (r.gpu_bytes is None, -(shown(r.gpu_bytes) or 0), r.pid))
    if key == "growth":
        return sorted(rows, key=lambda r: (r.growth_bytes is None, -(shown(r.growth_bytes) or 0), r.pid))
    if key == "rss":
        return sorted(rows, key=lambda r: (-(shown(r.rss) or 0), r.pid))
    raise ValueError(f"unknown sort key {key!r}; choose one of {', '.join(SORT_KEYS)}")


def filter_rows(rows: list[ProcessRow], text: str) -> list[ProcessRow]:
    needle = text.strip().lower()
    if not needle:
        return rows
    return [
        r
        for r in rows
        if needle in r.name.lower()
        or needle in r.cmdline.lower()
        or needle in r.user.lower()
        or needle == str(r.pid)
    ]


def row_style(row: ProcessRow) -> str:
    return "bold red" if row.fast_growing else ("bold yellow" if row.is_new else "")


def row_cells(row: ProcessRow, unit: Unit = GIB_UNIT) -> tuple[str, ...]:
    flag = "FAST" if row.fast_growing else ("NEW" if row.is_new else "")
    # no growth figure: a new process (its flag says so), or the window has not filled since memsight started
    growth = ("—" if row.is_new else "…") if row.growth_bytes is None else _growth(row.growth_bytes, unit)
    return (
        str(row.pid),
        ("● " if row.own else "") + (row.command or row.name)[:40],
        row.user[:12],
        figure(row.rss, unit),
        figure(row.gpu_bytes, unit),
        growth,
        flag,
    )


def _growth(n: int, unit: Unit) -> str:
    return signed_figure(n, unit, places(n / unit.bytes))
