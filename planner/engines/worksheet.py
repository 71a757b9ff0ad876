"""The explain worksheet every engine shares: each figure the engine logged beside memsight's prediction for
the same model and arguments, the difference and its cause in words, and how each predicted term is known.

An engine's explain() fills a Worksheet; `memsight explain` prints it (tui/cmd_explain.py) and
worksheet_json() gives the stable --json object. The keys an engine adds (vLLM: `vllm_version`, `engine`) come
after `model`, so every engine's object reads the same way.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.units import GiB


@dataclass(frozen=True, slots=True)
class Term:
    """One predicted term: its bytes, how it is known and where it comes from."""

    name: str
    bytes: int
    how: str  # "given" (a flag) | "log" (read from the engine's log) | "PREDICTED" | "default"
    source: str


@dataclass(frozen=True, slots=True)
class Row:
    """One logged figure beside its prediction, in the row's unit (GiB, MiB, blocks, tokens, cells, x)."""

    key: str
    logged: float | None
    logged_line: int | None
    predicted: float | None
    how: str  # how the predicted value is known: PREDICTED / given / log / default
    cause: str  # the difference in words ("" when there is no logged figure)

    @property
    def difference(self) -> float | None:
        if self.logged is None or self.predicted is None:
            return None
        return self.predicted - self.logged

    @property
    def relative(self) -> float | None:
        if self.logged in (None, 0) or self.predicted is None:
            return None
        return self.predicted / self.logged - 1


@dataclass(frozen=True, slots=True)
class Worksheet:
    """What `memsight explain` prints for one engine's log."""

    engine: str  # the registry name ("vllm", "llamacpp")
    line: str  # the worksheet line, printed first
    title: str  # the engine and its version as the header names them ("vLLM 0.19.0 (V1)")
    model: str
    identity: tuple[tuple[str, Any], ...]  # the engine's own --json keys, printed after "model"
    stage: str  # how far the log got
    inputs: tuple[tuple[str, str, str], ...]  # (name, value, where from)
    terms: tuple[Term, ...]
    rows: tuple[Row, ...]
    labels: Mapping[str, str]  # row key -> the label printed and put in --json
    notes: tuple[str, ...]
    counts: frozenset[str] = field(default_factory=frozenset)  # rows in whole units (no decimals)
    absolute: frozenset[str] = field(default_factory=frozenset)  # rows whose difference is absolute


def _number(x: float | None, digits: int = 4) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, digits)


def _term_json(term: Term) -> dict[str, Any]:
    return {
        "name": term.name,
        "gib": _number(term.bytes / GiB),
        "bytes": term.bytes,
        "how": term.how,
        "source": term.source,
    }


def worksheet_json(sheet: Worksheet) -> dict[str, Any]:
    """The stable --json object: worksheet, model, the engine's keys, stage, inputs, terms, rows, notes."""
    return {
        "worksheet": sheet.line,
        "model": sheet.model,
        **dict(sheet.identity),
        "stage": sheet.stage,
        "inputs": [{"name": n, "value": v, "from": w} for n, v, w in sheet.inputs],
        "terms": [
            {
                "name": t.name,
                "gib": _number(t.bytes / GiB),
                "bytes": t.bytes,
                "how": t.how,
                "source": t.source,
            }
            for t in sheet.terms
        ],
        "rows": {
            r.key: {
                "label": sheet.labels[r.key],
                "logged": _number(r.logged),
                "logged_line": r.logged_line,
                "predicted": _number(r.predicted),
                "difference": _number(r.difference),
                "relative": _number(r.relative),
                "how": r.how,
                "cause": r.cause,
            }
            for r in sheet.rows
        },
        "notes": list(sheet.notes),
    }


def median_and_worst(errors: list[float]) -> tuple[float, float]:
    """Median and worst absolute relative error (fractions)."""
    absolute = [abs(e) for e in errors]
    return statistics.median(absolute), max(absolute)


def max_users_meaning(max_users: int, tokens_per_user: int) -> str:
    """What the four-bucket plan's "max users" counts, set beside an engine's own figure of users (`memsight
    plan --engine NAME`'s "which answers what" line)."""
    return (
        f'memsight\'s "max users" ({max_users}) is how many users at {tokens_per_user:,} tokens fit the '
        "whole capacity with the plan's four buckets"
    )
