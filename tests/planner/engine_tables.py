"""The README's per-engine error tables: for each term, over the logs that state it, the median and worst
|error| of memsight's prediction and how many are within 3% (one function for every engine's test)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

from planner.engines.worksheet import Worksheet


def error_table(sheets: Iterable[Worksheet], keys: Iterable[str], labels: Mapping[str, str]) -> str:
    keys = tuple(keys)
    errors: dict[str, list[float]] = {key: [] for key in keys}
    for sheet in sheets:
        for row in sheet.rows:
            if row.key in errors and row.relative is not None:
                errors[row.key].append(abs(row.relative))
    lines = [
        "| term | logs | median \\|error\\| | worst \\|error\\| | within 3% |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key in keys:
        found = errors[key]
        if found:
            lines.append(
                f"| {labels[key]} | {len(found)} | {statistics.median(found):.1%} | {max(found):.1%} | "
                f"{sum(e <= 0.03 for e in found)} |"
            )
    return "\n".join(lines)
