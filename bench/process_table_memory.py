"""The Live screen's process table over many ticks: the memory Textual's DataTable holds while the figures
change at every tick (each changed cell rewritten in place, as the Live screen does). Run by hand, not a test:

    .venv/bin/python bench/process_table_memory.py --ticks 2000

15 rows whose resident size and growth change at every tick, under Textual's headless driver at 160x48; at
100, 500, 1,000 and 2,000 ticks it prints the memory tracemalloc traces since the first tick and the number of
renders in DataTable's caches (cells, rows, lines).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import pathlib
import sys
import tracemalloc

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GIB = 2**30


def rows(tick: int):
    from tui.widgets.data import ProcessRow  # noqa: PLC0415

    return tuple(
        ProcessRow(100 + i, "python", "lab", (30 - i) * GIB + tick * 2**26, None, tick * 2**24, False, False,
                   f"python job{i}.py")  # fmt: skip
        for i in range(15)
    )


async def play(ticks: int) -> None:
    from textual.app import App  # noqa: PLC0415

    from tui.widgets.process_table import ProcessTable  # noqa: PLC0415

    class TableApp(App):
        def compose(self):
            yield ProcessTable(id="procs", max_rows=15)

    app = TableApp()
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.query_one(ProcessTable)
        table.update_rows(rows(0))
        await pilot.pause()
        tracemalloc.start()
        for tick in range(1, ticks + 1):
            table.update_rows(rows(tick))
            await pilot.pause()
            if tick in (100, 500, 1000, 2000) or tick == ticks:
                gc.collect()
                traced = tracemalloc.get_traced_memory()[0] / 2**20
                print(f"{tick:5} ticks: traced {traced:.2f} MiB; cached renders: cells "
                      f"{len(table._cell_render_cache)}, rows {len(table._row_render_cache)}, lines "
                      f"{len(table._line_cache)}; {table.rebuild_count} rebuilds, {table.cell_updates} cells "
                      "rewritten", flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=2000)
    asyncio.run(play(parser.parse_args().ticks))
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
