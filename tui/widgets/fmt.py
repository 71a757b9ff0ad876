"""Formatting at the edge: bytes are int inside, a unit only when drawn, always labelled.

One helper for every figure on the screens. A table (the bucket comparison, the agents, the processes, a
chart's axis) takes one unit, KiB, MiB or GiB, chosen by unit_for from the figures it shows, and writes each
figure with at least three significant digits (figure): a tiny model's 15.9 MiB of weights reads 15.93 in a
MiB table, not 0.02 in a GiB one. A figure standing alone takes its own unit (size): 21.8 GiB, 640 KiB.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from planner.units import size_text

GIB = 2**30
MAX_DECIMALS = 4  # below 0.0001 of the table's unit a figure is written "<0.0001" (it is not zero)


@dataclass(frozen=True, slots=True)
class Unit:
    name: str  # "GiB"
    bytes: int


GIB_UNIT = Unit("GiB", 2**30)
MIB_UNIT = Unit("MiB", 2**20)
KIB_UNIT = Unit("KiB", 2**10)
UNITS = (GIB_UNIT, MIB_UNIT, KIB_UNIT)


def unit_for(values: Iterable[int | None]) -> Unit:
    """The unit of one table: the largest in which its largest figure is at least 1 (KiB at the least); GiB
    while it has no figure to size it by."""
    largest = max((abs(v) for v in values if v), default=None)
    if largest is None:
        return GIB_UNIT
    return next((u for u in UNITS if largest >= u.bytes), KIB_UNIT)


def places(value: float) -> int:
    """Decimals for a figure in a table: none from 1,000 on, two from 1 on (as the GiB tables always had), and
    below 1 as many as three significant digits take (0.656, 0.0155), at most MAX_DECIMALS."""
    v = abs(value)
    if v >= 1000:
        return 0
    if v >= 1 or v == 0:
        return 2
    return min(MAX_DECIMALS, 2 - math.floor(math.log10(v)))


def figure(n: int | None, unit: Unit) -> str:
    """A figure in `unit` for a table whose header names the unit: `14.96`, `1,751`, `0.168`; `—` unknown."""
    if n is None:
        return "—"
    value = n / unit.bytes
    if n and abs(value) < 10**-MAX_DECIMALS:
        return "<0.0001"
    return f"{value:,.{places(value)}f}"


def signed_figure(n: int | None, unit: Unit, decimals: int) -> str:
    """A difference in `unit` with its sign, at `decimals` (those of the figures it compares): `+0.04`,
    `-1,024`, `±0.00`."""
    if n is None:
        return "—"
    value = n / unit.bytes
    if round(value, decimals) == 0:
        return f"±{0:.{decimals}f}"
    return f"{value:+,.{decimals}f}"


# A figure standing alone: the planner's rule (planner/units.py), one place for the screens and the text
size = size_text


def split_cells(values: list[int], total_cells: int, scale: int) -> list[int]:
    """Cells per segment so that equal bytes get equal cells on a shared scale.

    Largest-remainder rounding keeps the sum exact (a bar never overflows its width), and a non-zero segment
    gets at least one cell when there is room, so a small but present bucket is never invisible.
    """
    if scale <= 0 or total_cells <= 0:
        return [0 for _ in values]
    used = min(sum(values), scale)
    budget = round(total_cells * used / scale)
    exact = [max(v, 0) * total_cells / scale for v in values]
    cells = [int(x) for x in exact]
    for i, v in enumerate(values):
        if v > 0 and cells[i] == 0 and sum(cells) < budget:
            cells[i] = 1
    remainders = sorted(range(len(values)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in remainders:
        if sum(cells) >= budget:
            break
        if values[i] > 0:
            cells[i] += 1
    while sum(cells) > budget:  # the one-cell minimum may overshoot; take back from the largest
        j = max(range(len(cells)), key=lambda i: cells[i])
        cells[j] -= 1
    return cells


# 10 MiB: below what a bar cell can show (the figures, whose unit follows the table, decide by their text)
DISPLAY_STEP = 10 * 2**20


def shown(n: int | None, step: int = DISPLAY_STEP) -> int | None:
    """A byte count at a bar's resolution, to decide whether a redraw would change anything."""
    return None if n is None else round(n / step)
