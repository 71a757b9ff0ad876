"""A field's statistics in `memsight replay --json` (collectors/recording_summary.py's _Stats): the values
the fast reader appends and folds in batches give what add() of each in turn gives, to the type (1 and 1.0
print differently), whatever the batch holds: NaN first, last or between, numbers that are no numbers,
integers past 2**53, and the conversion an agent's values go through."""

from __future__ import annotations

import json
import math
import random

import pytest

from collectors.recording_format import FIELD_VALUE
from collectors.recording_summary import _converted, _Stats

VALUES = (0, 1, 1.0, -1, 2.5, -2.5, 2**53, 2**53 + 1, -(2**53) - 1, 2**62, 1e300, math.nan, None, True, "7")


def _added(values, convert=None) -> dict:
    stats = _Stats()
    for value in values:
        stats.add(value if convert is None else _converted(value, convert))
    return stats.to_json()


def _folded(values, cuts, convert=None) -> dict:
    stats = _Stats()
    append = stats.appender(convert)
    for i, value in enumerate(values):
        append(value)
        if i in cuts:
            stats.fold()
    return stats.to_json()


@pytest.mark.parametrize("convert", [None, FIELD_VALUE["allocated"]], ids=["plain", "an agent's bytes"])
def test_values_folded_in_batches_give_what_adding_each_gives(convert):
    rnd = random.Random(20)
    pools = (VALUES, (0, 1, 2, 3, 2**40), (1.5, 2.5, math.nan), (None, 4, 4.0), (math.nan, 3))
    for case in range(3000):
        pool = rnd.choice(pools)
        values = [rnd.choice(pool) for _ in range(rnd.randint(0, 12))]
        if convert is not None:  # an agent's values are numbers or None, as its line's checks let through
            values = [v for v in values if v is None or type(v) in (int, float)]
        cuts = {i for i in range(len(values)) if rnd.random() < 0.3}
        want, got = _added(values, convert), _folded(values, cuts, convert)
        assert json.dumps(got) == json.dumps(want), (case, values, cuts)


@pytest.mark.parametrize("values", [[math.nan, 3, 1], [3, math.nan, 1], [3, 1, math.nan], [math.nan]])
def test_a_nan_anywhere_in_a_batch_is_no_number(values):
    assert _folded(values, set()) == _added(values) == (
        {"min": 1, "max": 3, "last": 1} if len(values) > 1 else {"min": None, "max": None, "last": None}
    )
