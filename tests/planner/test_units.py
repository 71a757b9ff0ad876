"""planner/units.py's size_text: the one rule for a figure standing alone, the screens' and the text's."""

from __future__ import annotations

from planner.units import size_text
from tui.widgets.fmt import size


def test_a_figure_standing_alone_keeps_three_significant_digits_in_its_own_unit():
    assert size_text(2_652_896) == "2.53 MiB" and size_text(10_000) == "9.77 KiB"
    assert size_text(294_912) == "288 KiB" and size_text(3 * 2**30 // 2) == "1.50 GiB"
    assert size_text(-15_930_000) == "-15.2 MiB" and size_text(0) == "0 B" and size_text(None) == "n/a"
    assert size is size_text  # the screens use the same rule, not a copy of it
