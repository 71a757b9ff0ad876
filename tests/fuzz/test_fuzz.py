"""Fuzz every reader surface with mutations of real files (tests/fuzz/surfaces.py): each case is read or
refused in the surface's own terms; no other exception (a crash), no case past the hang guard (a hang).

Profiles: the fast one runs in `.ci/run` (FAST_CASES per surface); the long one,
`MEMSIGHT_FUZZ=long .venv/bin/python scripts/fuzz_report.py`, runs LONG_CASES per surface, each surface in
its own process, and prints the README's "Reliability" table (cases, refusals, crashes, hangs, peak RSS).
"""

from __future__ import annotations

import json
import os
import resource

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import needs_shared
from tests.fuzz.surfaces import SURFACES, Hang, run_case

FAST_CASES = 120
LONG_CASES = 10_000
LONG = os.environ.get("MEMSIGHT_FUZZ") == "long"

settings.register_profile(
    "memsight-fuzz",
    max_examples=LONG_CASES if LONG else FAST_CASES,
    deadline=None,  # the hang guard (SIGALRM) bounds a case; timing is not what is tested
    derandomize=not LONG,  # CI: the same cases every run; the long run: fresh ones
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)

TALLY: dict[str, dict[str, int]] = {}


def _record(surface: str, outcome: str) -> None:
    counts = TALLY.setdefault(surface, {"cases": 0, "ok": 0, "refused": 0, "crashes": 0, "hangs": 0})
    counts[outcome] += 1
    if outcome in ("ok", "refused", "crashes", "hangs"):
        counts["cases"] += 1


@needs_shared
@pytest.mark.parametrize("surface", list(SURFACES))
def test_every_case_is_read_or_refused(surface):
    @settings(settings.get_profile("memsight-fuzz"))
    @given(seed=st.integers(0, 63), rnd=st.randoms(use_true_random=False))
    def one(seed, rnd):
        try:
            outcome = run_case(surface, seed, rnd)
        except Hang:
            _record(surface, "hangs")
            raise
        except Exception:  # not BaseException: hypothesis stops a case that ran out of data with one
            _record(surface, "crashes")
            raise
        _record(surface, outcome)

    try:
        one()
    finally:
        report = os.environ.get("MEMSIGHT_FUZZ_REPORT")
        if report:
            counts = TALLY.get(surface, {})
            counts["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            with open(report, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"surface": surface, **counts}) + "\n")
