"""`memsight --help` and `memsight plan --help` import only what the help they print needs (issue 20): the
parsers are built from light modules, and the planner, the collectors, dataclasses and typing are imported by
the commands when they run. A behaviour test (which modules a fresh interpreter loaded), not a timing one;
bench/cli_cost.py measures the CPU."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

# What printing the help may load of memsight: the dispatcher, the plan's option modules and the leaves they
# read (errors, limits, the machine presets' names, units).
ALLOWED_OWN = {
    "tui", "tui.cli", "tui.options", "tui.cmd_plan", "tui.plan_engines", "tui.cmd_plan_llamacpp",
    "planner", "planner.errors", "planner.limits", "planner.presets", "planner.units",
}  # fmt: skip
# Standard-library and third-party modules that cost more than the help itself (dataclasses pulls inspect;
# shutil pulls bz2 and lzma; argparse asks for it only for the terminal width).
# textwrap: its regular expressions are compiled at import (tui/cli.py's wrap_words wraps the help instead);
# locale: gettext imports it to look for a translation of argparse's words (untranslated_argparse).
HEAVY = {
    "dataclasses", "inspect", "typing", "shutil", "json", "pathlib", "textual", "psutil", "pynvml",
    "textwrap", "locale",
}  # fmt: skip

CODE = """
import sys
before = set(sys.modules)
from tui.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(repr({"code": code, "loaded": sorted(set(sys.modules) - before)}), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["--help"], ["plan", "--help"]], ids=["help", "plan-help"])
def test_help_imports_no_heavy_module(argv):
    done = subprocess.run(
        [sys.executable, "-c", CODE, *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = ast.literal_eval(done.stderr.splitlines()[-1])
    usage = "usage: memsight plan " if argv[0] == "plan" else "usage: memsight "
    assert report["code"] == 0 and done.stdout.startswith(usage)
    loaded = set(report["loaded"])
    own = {m for m in loaded if m.split(".")[0] in ("tui", "planner", "collectors")}
    assert own <= ALLOWED_OWN, f"--help imported {sorted(own - ALLOWED_OWN)}"
    assert not loaded & HEAVY, f"--help imported {sorted(loaded & HEAVY)}"
    if argv[0] == "plan":  # the options are there: the help is the whole plan's, not a bare parser's
        assert "--machine {spark,h100,h200,rtx4090,this}" in done.stdout and "--n-gpu-layers" in done.stdout



def test_replay_json_imports_no_heavy_module(tmp_path):
    """`memsight replay FILE --json` of a recording with its summary reads it with the readers alone: no
    typing (5 ms of its start-up on the bench's VM), no dataclasses, no Textual, no psutil."""
    from collectors.recorder import Recorder  # noqa: PLC0415
    from collectors.replay import ReplayMonitor  # noqa: PLC0415
    from collectors.snapshots import ProcessInfo  # noqa: PLC0415
    from tests.collectors.builders import GiB, os_snapshot  # noqa: PLC0415

    proc = ProcessInfo(pid=100, name="python", cmdline="job", user="ada", rss=GiB, growth_bytes=None,
                       is_new=False, start_ticks=5, growth_window_s=30.0)  # fmt: skip
    summary = None
    for name in ("without-summary.jsonl", "r.jsonl"):  # the second with the first's summary, as a run ends
        path = tmp_path / name
        rec = Recorder(path, hz=2.0)
        for i in range(3):
            rec.os(os_snapshot(1.7e9 + i, 32 * GiB, (proc,)))
        if summary is not None:
            rec.summary(summary)
        rec.close()
        summary = ReplayMonitor(str(path)).scan()
    done = subprocess.run(
        [sys.executable, "-c", CODE.replace("    main(", "    code = main("), "replay", str(path), "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = ast.literal_eval(done.stderr.splitlines()[-1])
    assert report["code"] == 0 and '"summary_from": "recorded"' in done.stdout
    loaded = set(report["loaded"])
    assert not loaded & (HEAVY - {"json"}), f"replay --json imported {sorted(loaded & HEAVY)}"
