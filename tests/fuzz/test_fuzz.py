"""Fuzz every surface with mutations of real files (tests/fuzz/surfaces.py): each case is read or refused in
the surface's own terms; no other exception (a crash), no case past the hang guard (a hang).

Profiles: the fast one runs in the test run (FAST_CASES per surface, fewer for the live screen); the long one,
`MEMSIGHT_FUZZ=long .venv/bin/python scripts/fuzz_report.py`, runs LONG_CASES per surface, each surface in
its own process, and prints the README's "Reliability" table (cases, refusals, crashes, hangs, peak RSS).
Without ../shared the seeds are the project's own data, and the run says which (a warning per surface).
"""

from __future__ import annotations

import json
import os
import resource
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO_ROOT, SHARED
from tests.fuzz import surfaces
from tests.fuzz.surfaces import SURFACES, Hang, run_case

LONG = os.environ.get("MEMSIGHT_FUZZ") == "long"

settings.register_profile(
    "memsight-fuzz",
    deadline=None,  # the hang guard (SIGALRM) bounds a case; timing is not what is tested
    derandomize=not LONG,  # the test run: the same cases every run; the long run: fresh ones
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


@pytest.mark.parametrize("surface", list(SURFACES))
def test_every_case_is_read_or_refused(surface):
    seeds = SURFACES[surface].seeds()
    if not SHARED.is_dir():
        warnings.warn(f"fuzzing {surface!r} from {seeds.origin}", UserWarning, stacklevel=1)

    @settings(settings.get_profile("memsight-fuzz"), max_examples=SURFACES[surface].cases(LONG))
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
                fh.write(json.dumps({"surface": surface, **counts, "seeds": seeds.origin}) + "\n")


def test_without_shared_every_surface_has_seeds_from_the_projects_own_data(monkeypatch, tmp_path):
    """The suite runs on a clean clone without ../shared: each surface then fuzzes the project's own data,
    and says so."""
    absent = tmp_path / "no-shared"
    monkeypatch.setattr(surfaces, "SHARED_CONFIGS", absent / "configs")
    monkeypatch.setattr(surfaces, "SHARED_FIXTURES", absent / "fixtures")
    for cached in (surfaces.config_seeds, surfaces.vllm_metrics_seeds, surfaces.recording_seeds):
        cached.cache_clear()
    try:
        for name, s in SURFACES.items():
            seeds = s.seeds()
            assert seeds.data and all(seeds.data), name
            assert "../shared" not in seeds.origin or "../shared absent" in seeds.origin, (name, seeds.origin)
        catalog = json.loads((REPO_ROOT / "planner" / "data" / "catalog.json").read_text())["models"]
        origin = surfaces.config_seeds().origin
        assert origin.startswith(f"the {len(catalog)} configs of planner/data/catalog.json")
        assert len(surfaces.recording_seeds().data) == 3
    finally:
        for cached in (surfaces.config_seeds, surfaces.vllm_metrics_seeds, surfaces.recording_seeds):
            cached.cache_clear()
