"""Caches of Textual and Rich that a screen redrawing changing figures all day should not keep: four
process-wide caches bounded, and the seven caches of every Strip dropped.

- Textual keeps the ANSI codes of the Rich styles it writes in `Strip.render_ansi`, 16,384 entries. Text
  drawn through Textual's Content (every Static and Label whose text changes) carries its screen offset in
  each style's meta, and Rich gives a style with meta a link id of its own, so no two of those styles are
  equal: in the Live screen under process churn the cache had 0 hits in 593 misses after 7 minutes and kept
  every style, ~480 bytes each with its meta, ~7.5 MiB once full (about three hours in). A style drawn
  twice finds its codes on itself (`Style._ansi`); the cache only serves an equal style made again, so a
  few hundred entries lose nothing.
- Rich keeps the cell width of each string under 512 characters it measured in `cached_cell_len`, 4,096
  entries: 2,317 strings and 612 KiB after those 7 minutes (each figure that changed is a new string). A
  miss costs one set test for a string of single-width characters: 256 entries are enough. With an agent's
  run every 30 s, two Live screens side by side held 0.15-0.25 MiB less at 256 than at 1,024 over 6 minutes,
  for the same CPU (26.2-26.6 s each; a probe, not a bench).
- Rich keeps the sum of each two styles it added in `Style._add`, and Textual each style it put on the
  screen's background in `ANSIToTruecolor.truecolor_style`, 1,024 entries each. The gap chart, shown once an
  agent is (tui/widgets/gap_chart.py), marks each run of its characters with its offset, as Content does: a
  style per run and place, 250-600 new ones a minute that fill both caches within the first half hour, and
  hold them, ~0.4 KiB an entry. With agents coming and going every 60 s, the Live screen held 44.5 MiB at 8
  minutes with both at 256 entries against 45.4 MiB at 1,024, for the same CPU (21.0 s each; a probe of two
  Live screens side by side, the one bounded from its start, not a bench). A miss costs a style sum.
- Textual gives every Strip (one line of segments) seven FIFO caches of its own: the strips it made by
  cropping, dividing, styling, filtering, padding, extending and offsetting that line. Each is an object and
  a dict (~130 bytes empty), and each strip they keep has seven more. The Live screen at 160x48 held
  1,921 strips after drawing the Plan screen and coming back, 647 without these caches (the same screen,
  tests/tui/test_strip_caches.py), and under process churn they are much of what pymalloc's arenas fill
  with between frames: in a probe (not a bench) of four Live screens side by side with a process started
  every 2 s, the screen without them held 45.8 MiB at 8 minutes against 49.2. A strip is immutable and
  each of these methods is pure, so a miss makes the same strip again: the Live screen redraws only the
  widgets whose figures changed (issue 20), and their strips are new anyway. That may still cost some CPU:
  bench/monitor_cpu.py read 0.87x the minimal app's after the change (0.79-1.11) against 0.76x (0.69-0.80)
  before, one run each with spreads that overlap.

`bound_render_caches()` puts each of the four functions in a smaller cache, once per process, and
`drop_strip_caches()` makes every Strip made from then on share one cache that keeps nothing (the app calls
both when it is made). A Textual or Rich without one of these caches, or whose Strip is not the one described
here, is left as it is; tests/tui/test_render_caches.py and test_strip_caches.py hold the installed versions
to all of them.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

RENDER_ANSI_ENTRIES = 256
CELL_LEN_ENTRIES = 256
STYLE_ADD_ENTRIES = 256
TRUECOLOR_ENTRIES = 256
# Strip's per-line caches (textual/strip.py: Strip.__init__), each a FIFOCache read with get() and written
# with [key] = value, and the other attributes its __init__ sets
STRIP_CACHES = (
    "_divide_cache", "_crop_cache", "_style_cache", "_filter_cache", "_line_length_cache",
    "_crop_extend_cache", "_offsets_cache",
)  # fmt: skip
STRIP_LAZY = ("_render_cache", "_link_ids", "_cell_count")  # None until asked for


def render_ansi_cache() -> Any:
    """Textual's `Strip.render_ansi` lru_cache wrapper, or None where this Textual has no such cache."""
    from textual.strip import Strip  # noqa: PLC0415

    return _lru_wrapper(getattr(Strip.__dict__.get("render_ansi"), "__func__", None))


def cell_len_cache() -> Any:
    """Rich's `cached_cell_len` lru_cache wrapper, or None where this Rich has no such cache."""
    import rich.cells  # noqa: PLC0415

    return _lru_wrapper(getattr(rich.cells, "cached_cell_len", None))


def style_add_cache() -> Any:
    """Rich's `Style._add` lru_cache wrapper (the sum of two styles), or None where this Rich has none."""
    from rich.style import Style  # noqa: PLC0415

    return _lru_wrapper(Style.__dict__.get("_add"))


def truecolor_style_cache() -> Any:
    """Textual's `ANSIToTruecolor.truecolor_style` lru_cache wrapper (a style's colours on the screen's
    background), or None where this Textual has none."""
    from textual.filter import ANSIToTruecolor  # noqa: PLC0415

    return _lru_wrapper(ANSIToTruecolor.__dict__.get("truecolor_style"))


def _lru_wrapper(candidate: Any) -> Any:
    if callable(getattr(candidate, "cache_info", None)) and hasattr(candidate, "__wrapped__"):
        return candidate
    return None


def bound_render_caches() -> int:
    """From now on Textual's render_ansi cache holds at most RENDER_ANSI_ENTRIES styles, Rich's cell widths
    at most CELL_LEN_ENTRIES strings, Rich's sums of two styles STYLE_ADD_ENTRIES and Textual's styles on
    the background TRUECOLOR_ENTRIES (the same functions, their results unchanged). Returns how many of the
    four caches are bounded; calling it again changes nothing more."""
    from rich.style import Style  # noqa: PLC0415
    from textual.filter import ANSIToTruecolor  # noqa: PLC0415
    from textual.strip import Strip  # noqa: PLC0415

    bounded = 0
    wrapper = render_ansi_cache()
    if wrapper is not None:
        if wrapper.cache_info().maxsize != RENDER_ANSI_ENTRIES:
            Strip.render_ansi = classmethod(_smaller(wrapper, RENDER_ANSI_ENTRIES))
        bounded += 1
    wrapper = cell_len_cache()
    if wrapper is not None:
        if wrapper.cache_info().maxsize != CELL_LEN_ENTRIES:
            _replace_everywhere(wrapper, _smaller(wrapper, CELL_LEN_ENTRIES))
        bounded += 1
    for owner, name, find, entries in (
        (Style, "_add", style_add_cache, STYLE_ADD_ENTRIES),
        (ANSIToTruecolor, "truecolor_style", truecolor_style_cache, TRUECOLOR_ENTRIES),
    ):
        wrapper = find()
        if wrapper is not None:
            if wrapper.cache_info().maxsize != entries:
                setattr(owner, name, _smaller(wrapper, entries))  # (a method: the wrapper binds as one)
            bounded += 1
    return bounded


def _smaller(wrapper: Any, entries: int) -> Any:
    return functools.lru_cache(maxsize=entries)(wrapper.__wrapped__)


def _replace_everywhere(old: Any, new: Any) -> None:
    """`old` replaced by `new` in every loaded Rich and Textual module that holds it by name (textual._cells
    and rich.segment import it; a module imported later takes the replaced name from them)."""
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in ("rich", "textual") and module is not None:
            for attr, value in list(vars(module).items()):
                if value is old:
                    setattr(module, attr, new)


class _KeepsNothing:
    """A FIFOCache that keeps nothing: every get() misses, every store is dropped (one for every Strip)."""

    __slots__ = ()

    def get(self, key: Any, default: Any = None) -> Any:
        return default

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __len__(self) -> int:
        return 0


KEEPS_NOTHING = _KeepsNothing()


def strip_is_as_described() -> bool:
    """Whether this Textual's Strip has exactly the attributes STRIP_CACHES and STRIP_LAZY name, besides its
    segments and cell length, set as described there (a Strip made by its own __init__ is looked at)."""
    from textual.cache import FIFOCache  # noqa: PLC0415
    from textual.strip import Strip  # noqa: PLC0415

    slots = set(getattr(Strip, "__slots__", ()))
    if slots != {"_segments", "_cell_length", *STRIP_CACHES, *STRIP_LAZY}:
        return False
    strip = object.__new__(Strip)
    _original_strip_init(Strip)(strip, [], 0)
    return all(isinstance(getattr(strip, name), FIFOCache) for name in STRIP_CACHES) and all(
        getattr(strip, name) is None for name in STRIP_LAZY
    )


def _original_strip_init(strip_class: type) -> Any:
    init = strip_class.__init__
    return getattr(init, "_memsight_original", init)


def drop_strip_caches() -> bool:
    """Every Strip made from now on shares KEEPS_NOTHING for its seven caches (its results unchanged: each
    is made again when asked for again). False, and nothing changed, where this Textual's Strip is not the
    one described above."""
    from textual.strip import Strip  # noqa: PLC0415

    if getattr(Strip.__init__, "_memsight_original", None) is not None:
        return True
    if not strip_is_as_described():
        return False
    original = Strip.__init__

    def __init__(self: Any, segments: Any, cell_length: int | None = None) -> None:
        # STRIP_CACHES and STRIP_LAZY written out, not looped over: every line drawn makes Strips
        # (tests/tui/test_strip_caches.py checks each cache of a new Strip is KEEPS_NOTHING)
        self._segments = list(segments)
        self._cell_length = cell_length
        self._divide_cache = self._crop_cache = self._style_cache = self._filter_cache = KEEPS_NOTHING
        self._line_length_cache = self._crop_extend_cache = self._offsets_cache = KEEPS_NOTHING
        self._render_cache = self._link_ids = self._cell_count = None

    __init__._memsight_original = original  # type: ignore[attr-defined]
    __init__.__doc__ = original.__doc__
    Strip.__init__ = __init__
    return True
