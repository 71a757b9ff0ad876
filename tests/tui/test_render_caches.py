"""Textual's cache of each drawn style's ANSI codes and Rich's cache of cell widths are bounded once the app
is made (tui/render_caches.py): the styles Textual's Content draws carry their offset in meta, are never
equal, and filled its 16,384 entries over a session's first hours; each changing figure is a new string to
measure. Run in a fresh interpreter: the bounds are process-wide."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio
from rich.color import ColorSystem
from textual.strip import Strip
from textual.style import Style
import sys
import rich.cells, rich.segment, textual._cells
from tui.render_caches import CELL_LEN_ENTRIES, RENDER_ANSI_ENTRIES, cell_len_cache, render_ansi_cache

def draw(count, first):
    styles = [Style.parse("bold #ff8800 on #101020").rich_style_with_offset(x, first) for x in range(count)]
    return styles, [Strip.render_style(s, "42.0 GiB", ColorSystem.TRUECOLOR) for s in styles]

# Textual's own cache: styles with an offset are never equal, so it keeps each one and never hits
unbounded = render_ansi_cache()
assert unbounded.cache_info().maxsize > 2 * RENDER_ANSI_ENTRIES, unbounded.cache_info()
draw(2 * RENDER_ANSI_ENTRIES, 0)
info = unbounded.cache_info()
assert info.hits == 0 and info.currsize == 2 * RENDER_ANSI_ENTRIES, info
widths = cell_len_cache()
assert widths.cache_info().maxsize > 2 * CELL_LEN_ENTRIES and textual._cells.cell_len is widths

def measure(count):
    texts = [f"{x / 7:.3f} GiB" for x in range(count)] + ["中文 " + str(x) for x in range(count)]
    return texts, [rich.cells.cell_len(t) for t in texts] + [textual._cells.cell_len(t) for t in texts]

from tests.tui.fixed_states import gb10_state
from tests.tui.test_snapshots import app_on

async def live():
    app = app_on(gb10_state())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        bounded = render_ansi_cache()
        assert bounded is not unbounded and bounded.cache_info().maxsize == RENDER_ANSI_ENTRIES
        assert bounded.__wrapped__ is unbounded.__wrapped__  # the same function, in a smaller cache
        styles, drawn = draw(4 * RENDER_ANSI_ENTRIES, 1)
        info = bounded.cache_info()
        assert info.misses >= 4 * RENDER_ANSI_ENTRIES and info.currsize == RENDER_ANSI_ENTRIES, info
        # the codes written are what Textual's own function gives for each style
        for style, text in zip(styles, drawn):
            codes = unbounded.__wrapped__(Strip, style, ColorSystem.TRUECOLOR)
            assert text == f"\\x1b[{codes}m42.0 GiB\\x1b[0m", (text, codes)
        # every Rich and Textual module that held Rich's cell-width cache now holds the bounded one
        bounded_widths = cell_len_cache()
        assert bounded_widths.cache_info().maxsize == CELL_LEN_ENTRIES
        assert textual._cells.cell_len is bounded_widths and rich.segment.cached_cell_len is bounded_widths
        ours = [m for name, m in list(sys.modules.items()) if name.split(".")[0] in ("rich", "textual")]
        held = [m.__name__ for m in ours if any(value is widths for value in list(vars(m).values()))]
        assert not held, held
        texts, measured = measure(2 * CELL_LEN_ENTRIES)
        assert bounded_widths.cache_info().currsize == CELL_LEN_ENTRIES, bounded_widths.cache_info()
        assert widths.cache_info().currsize < 2 * CELL_LEN_ENTRIES  # nothing measured through the old one
        expected = [widths.__wrapped__(t, "auto") for t in texts]
        # the last text: two wide characters, a space and the number
        assert measured == expected * 2 and measured[-1] == 2 * 2 + 1 + len(str(2 * CELL_LEN_ENTRIES - 1))
        app.exit()
    from tui.render_caches import bound_render_caches
    assert bound_render_caches() == 2  # both caches; a second call changes nothing
    assert render_ansi_cache() is bounded and cell_len_cache() is bounded_widths
    print("bounded", bounded.cache_info())

asyncio.run(live())
"""


def test_the_app_bounds_textuals_cache_of_drawn_styles_and_draws_the_same_codes():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("bounded CacheInfo("), done.stdout
