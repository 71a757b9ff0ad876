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
from tui.render_caches import STYLE_ADD_ENTRIES, TRUECOLOR_ENTRIES, style_add_cache, truecolor_style_cache
from rich.style import Style as RichStyle
from textual.filter import ANSIToTruecolor
from textual._ansi_theme import DEFAULT_TERMINAL_THEME
from rich.color import Color as RichColor

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

sums, on_screen = style_add_cache(), truecolor_style_cache()
assert sums.cache_info().maxsize > 2 * STYLE_ADD_ENTRIES
assert on_screen.cache_info().maxsize > 2 * TRUECOLOR_ENTRIES

def styles_of(count):  # styles with an offset each, as the gap chart draws its runs: each new to both caches
    return [RichStyle(color="#ff8800", meta={"offset": (x, 1)}) for x in range(count)]

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
        # Rich's sums of two styles and Textual's styles on the background: smaller caches of the same
        # functions, whose results are theirs
        for find, old, entries in ((style_add_cache, sums, STYLE_ADD_ENTRIES),
                                   (truecolor_style_cache, on_screen, TRUECOLOR_ENTRIES)):
            new = find()
            assert new is not old and new.__wrapped__ is old.__wrapped__
            assert new.cache_info().maxsize == entries
        bold, background = RichStyle(bold=True), RichColor.parse("#101020")
        convert = ANSIToTruecolor(DEFAULT_TERMINAL_THEME)
        styles = styles_of(4 * STYLE_ADD_ENTRIES)
        added = [style + bold for style in styles]
        shown = [convert.truecolor_style(style, background) for style in styles]
        assert style_add_cache().cache_info().currsize == STYLE_ADD_ENTRIES
        assert truecolor_style_cache().cache_info().currsize == TRUECOLOR_ENTRIES
        assert added == [sums.__wrapped__(style, bold) for style in styles]
        assert shown == [on_screen.__wrapped__(convert, style, background) for style in styles]
        assert added[-1].bold and added[-1].meta == {"offset": (4 * STYLE_ADD_ENTRIES - 1, 1)}
        app.exit()
    from tui.render_caches import bound_render_caches
    assert bound_render_caches() == 4  # all four caches; a second call changes nothing
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


AGENTS_SCRIPT = """
import asyncio, sys
from tests.tui.fixed_states import gb10_state
from tests.tui.test_snapshots import app_on
from tui.widgets.agents_table import AgentsTable

async def live():
    app = app_on(gb10_state())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(AgentsTable)
        assert table.row_count >= 1 and table.display, table.row_count
        print("agents", table.row_count, "emoji" if "rich._emoji_codes" in sys.modules else "no emoji")
        app.exit()

asyncio.run(live())
"""


def test_the_agents_table_draws_its_cells_without_rich_markup():
    """Each cell of the agents table is Rich Text: a str cell is parsed as markup, whose first use imports
    Rich's table of emoji names (~0.1 MiB traced, resident in the monitor from the first agent it shows)."""
    done = subprocess.run(
        [sys.executable, "-c", AGENTS_SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("agents ") and done.stdout.strip().endswith("no emoji"), done.stdout
