"""The gap chart's braille renderer (tui/widgets/braille_chart.py): dots where the values are, a frame whose
ticks sit at round values, every row the width asked for."""

from __future__ import annotations

import math

import pytest

from tui.widgets.braille_chart import BRAILLE_BLANK, ChartLine, chart_rows, nice_ticks, tick_label


def text(rows) -> list[str]:
    return ["".join(chars for chars, _ in runs) for runs in rows]


def canvas(rows) -> list[str]:
    """The cells inside the frame (the rows between its top and bottom, without the axis and the sides)."""
    lines = text(rows)[2:-2]
    return [line[line.index(next(c for c in line if c in "│┤")) + 1 : -1] for line in lines]


def test_ticks_are_round_values_inside_the_range():
    assert nice_ticks(0.0, 149.5, 10) == [0, 20, 40, 60, 80, 100, 120, 140]
    assert nice_ticks(1.0, 2.89, 5) == [1.0, 1.5, 2.0, 2.5]
    assert nice_ticks(0.3, 0.9, 3) == [0.4, 0.6, 0.8]
    assert nice_ticks(5.0, 5.0, 4) == [5.0]  # an empty range: its one value
    assert [tick_label(v, [1.0, 1.5]) for v in (1.0, 1.5)] == ["1.0", "1.5"]
    assert [tick_label(v, [0, 20]) for v in (0, 20)] == ["0", "20"]
    assert tick_label(0.25, [0.25, 0.5]) == "0.25"


def test_a_rising_line_goes_from_the_bottom_left_dot_to_the_top_right_one():
    rows = chart_rows(16, 7, "t", [0.0, 1.0], [ChartLine([0.0, 1.0], "", "green")], 0.0, 1.0)
    lines = text(rows)
    assert lines[0] == "t".center(16)
    # y ticks 0 and 1 (labels of one character): the frame starts at column 1, the canvas at 2, 13 cells
    assert lines[1] == " ┌" + "─" * 13 + "┐"
    assert lines[2].startswith("1┤") and lines[4].startswith("0┤") and lines[3].startswith(" │")
    cells = canvas(rows)
    assert len(cells) == 3 and all(len(row) == 13 for row in cells)
    # dot (x 0, y 11) is the bottom-left cell's lowest left dot; (25, 0) the top-right cell's top right dot
    assert (ord(cells[2][0]) - BRAILLE_BLANK) & 0x40 and (ord(cells[0][12]) - BRAILLE_BLANK) & 0x08
    # a connected line: a dot in every column of cells, and none outside its diagonal band
    assert all(any(row[col] != " " for row in cells) for col in range(13))
    assert cells[0][0] == " " and cells[2][12] == " "
    colours = {color for runs in rows for chars, color in runs if color is not None}
    assert colours == {"green"}


def test_a_missing_value_breaks_the_line():
    values = [0.0, math.nan, 1.0]
    joined = canvas(chart_rows(16, 7, "", [0.0, 0.5, 1.0], [ChartLine([0.0, 0.0, 1.0], "", "red")], 0.0, 1.0))
    broken = canvas(chart_rows(16, 7, "", [0.0, 0.5, 1.0], [ChartLine(values, "", "red")], 0.0, 1.0))
    dots = lambda cells: sum(c != " " for row in cells for c in row)  # noqa: E731
    assert dots(broken) == 2 < dots(joined)  # the two ends, nothing between


def test_the_last_line_drawn_colours_a_shared_cell_and_the_legend_names_each():
    lines = [ChartLine([1.0, 1.0], "reserved", "blue"), ChartLine([1.0, 1.0], "gap", "red")]
    rows = chart_rows(40, 10, "", [0.0, 10.0], lines, 0.0, 2.0)
    runs = [run for row in rows for run in row]
    assert ("⠤⠤", "blue") in runs and ("⠤⠤", "red") in runs
    plain = text(rows)
    assert any("⠤⠤ reserved" in line for line in plain) and any("⠤⠤ gap" in line for line in plain)
    drawn = {color for row in rows[4:-2] for chars, color in row if color and chars.strip("⠤")}
    assert drawn == {"red"}  # the same values: gap drawn over reserved


def test_time_ticks_are_labelled_under_their_marks():
    rows = chart_rows(60, 8, "", [0.0, 60.0], [ChartLine([0.0, 1.0], "", "blue")], 0.0, 1.0)
    bottom, labels = text(rows)[-2:]
    marks = [i for i, c in enumerate(bottom) if c == "┬"]
    assert len(marks) >= 3
    for col in marks:
        assert labels[col].strip(), (col, labels)  # a digit of the tick's label under each mark
    assert labels.split()[:2] == ["0", "10"]


@pytest.mark.parametrize("size", [(1, 1), (5, 3), (11, 6), (12, 4), (12, 5), (80, 12), (200, 48)])
def test_every_row_is_the_width_asked_for(size):
    width, height = size
    rows = chart_rows(width, height, "a title longer than a small chart", [0.0, 1.0, 2.0],
                      [ChartLine([0.0, 5.0, 2.5], "allocated", "green")], 0.0, 5.0)  # fmt: skip
    assert len(rows) == height
    assert [len(line) for line in text(rows)] == [width] * height
