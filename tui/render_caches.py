"""Two process-wide caches of Textual and Rich, bounded: a screen that redraws changing figures all day must
not keep every style and every string it ever drew.

- Textual keeps the ANSI codes of the Rich styles it writes in `Strip.render_ansi`, 16,384 entries. Text
  drawn through Textual's Content (every Static and Label whose text changes) carries its screen offset in
  each style's meta, and Rich gives a style with meta a link id of its own, so no two of those styles are
  equal: in the Live screen under process churn the cache had 0 hits in 593 misses after 7 minutes and kept
  every style, ~480 bytes each with its meta, ~7.5 MiB once full (about three hours in). A style drawn
  twice finds its codes on itself (`Style._ansi`); the cache only serves an equal style made again, so a
  few hundred entries lose nothing.
- Rich keeps the cell width of each string under 512 characters it measured in `cached_cell_len`, 4,096
  entries: 2,317 strings and 612 KiB after those 7 minutes (each figure that changed is a new string). A
  miss costs one set test for a string of single-width characters, so 1,024 entries are enough.

`bound_render_caches()` puts each function in a smaller cache, once per process (the app calls it when it is
made). A Textual or Rich without one of these caches has nothing to bound there; a test holds the installed
versions to both.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

RENDER_ANSI_ENTRIES = 256
CELL_LEN_ENTRIES = 1024


def render_ansi_cache() -> Any:
    """Textual's `Strip.render_ansi` lru_cache wrapper, or None where this Textual has no such cache."""
    from textual.strip import Strip  # noqa: PLC0415

    return _lru_wrapper(getattr(Strip.__dict__.get("render_ansi"), "__func__", None))


def cell_len_cache() -> Any:
    """Rich's `cached_cell_len` lru_cache wrapper, or None where this Rich has no such cache."""
    import rich.cells  # noqa: PLC0415

    return _lru_wrapper(getattr(rich.cells, "cached_cell_len", None))


def _lru_wrapper(candidate: Any) -> Any:
    if callable(getattr(candidate, "cache_info", None)) and hasattr(candidate, "__wrapped__"):
        return candidate
    return None


def bound_render_caches(render_ansi: int = RENDER_ANSI_ENTRIES, cell_len: int = CELL_LEN_ENTRIES) -> int:
    """Textual's render_ansi cache holds at most `render_ansi` styles, and Rich's cell widths at most
    `cell_len` strings, from now on (the same functions, their results unchanged). Returns how many of the
    two caches are bounded; calling it again changes nothing more."""
    from textual.strip import Strip  # noqa: PLC0415

    bounded = 0
    wrapper = render_ansi_cache()
    if wrapper is not None:
        if wrapper.cache_info().maxsize != render_ansi:
            Strip.render_ansi = classmethod(functools.lru_cache(maxsize=render_ansi)(wrapper.__wrapped__))
        bounded += 1
    wrapper = cell_len_cache()
    if wrapper is not None:
        if wrapper.cache_info().maxsize != cell_len:
            _replace_everywhere(wrapper, functools.lru_cache(maxsize=cell_len)(wrapper.__wrapped__))
        bounded += 1
    return bounded


def _replace_everywhere(old: Any, new: Any) -> None:
    """`old` replaced by `new` in every loaded Rich and Textual module that holds it by name (textual._cells
    and rich.segment import it; a module imported later takes the replaced name from them)."""
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in ("rich", "textual") and module is not None:
            for attr, value in list(vars(module).items()):
                if value is old:
                    setattr(module, attr, new)
