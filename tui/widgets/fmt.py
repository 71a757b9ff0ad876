"""Formatting at the edge: bytes are int inside, GiB (2**30) only when drawn, always labelled."""

from __future__ import annotations

GIB = 2**30


def gib(n: int | None, digits: int = 1) -> str:
    """`12.3 GiB`, or `n/a` when the number is unknown."""
    if n is None:
        return "n/a"
    return f"{n / GIB:.{digits}f} GiB"


def gib_num(n: int | None, digits: int = 1) -> str:
    """The bare figure in GiB (for columns whose header carries the unit)."""
    if n is None:
        return "—"
    return f"{n / GIB:.{digits}f}"


def signed_gib(n: int | None, digits: int = 1) -> str:
    """A difference in GiB with its sign (`+0.4`, `-1.2`, `±0.0`)."""
    if n is None:
        return "—"
    value = n / GIB
    if round(value, digits) == 0:
        return f"±{0:.{digits}f}"
    return f"{value:+.{digits}f}"


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


DISPLAY_STEP = 10 * 2**20  # 10 MiB: below what any figure on screen (0.01 GiB) or bar cell can show


def shown(n: int | None, step: int = DISPLAY_STEP) -> int | None:
    """A byte count at display resolution, to decide whether a redraw would change anything."""
    return None if n is None else round(n / step)
