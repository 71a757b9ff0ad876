"""The long fuzz run and its table: every surface of tests/fuzz, each in its own pytest process (so its peak
RSS is its own), LONG_CASES cases each, then the README's "Reliability" table in Markdown and, under it, the
seeds each surface was fuzzed from (the project's own data when ../shared is absent).

    MEMSIGHT_FUZZ=long .venv/bin/python scripts/fuzz_report.py [--jobs 2] [SURFACE ...]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fuzz.surfaces import SURFACES  # noqa: E402


def run_one(surface: str, report: pathlib.Path) -> tuple[str, int, float]:
    began = time.monotonic()
    env = {**os.environ, "MEMSIGHT_FUZZ": os.environ.get("MEMSIGHT_FUZZ", "long"),
           "MEMSIGHT_FUZZ_REPORT": str(report)}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"tests/fuzz/test_fuzz.py::test_every_case_is_read_or_refused[{surface}]"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode:
        print(proc.stdout[-4000:], proc.stderr[-2000:], file=sys.stderr)
    return surface, proc.returncode, time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("surfaces", nargs="*", default=list(SURFACES))
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        report = pathlib.Path(d) / "fuzz.jsonl"
        report.touch()
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda s: run_one(s, report), args.surfaces))
        rows = {r["surface"]: r for r in map(json.loads, report.read_text().splitlines())}
    print("| surface | cases | read | refused | crashes | hangs | peak RSS | wall |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    status = 0
    for surface, code, wall in results:
        r = rows.get(surface, {})
        status |= code
        print(
            f"| {surface} | {r.get('cases', 0):,} | {r.get('ok', 0):,} | {r.get('refused', 0):,} | "
            f"{r.get('crashes', 0)} | {r.get('hangs', 0)} | {r.get('peak_rss_mib', '?')} MiB | {wall:.0f} s |"
        )
    print()
    for surface, _, _ in results:
        print(f"- {surface}: seeds: {rows.get(surface, {}).get('seeds', '?')}")
    return status


if __name__ == "__main__":
    sys.exit(main())
