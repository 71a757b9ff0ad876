"""Shared test helpers: where ../shared/ lives, and a skip marker for when it is absent."""

from __future__ import annotations

import atexit
import importlib.util
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

# A suite started in the background by a script (`cmd &`, a CI runner without a terminal) inherits SIGINT
# ignored, and so would every process the tests start: an ignored signal stays ignored across exec, and Python
# then installs no KeyboardInterrupt. The tests that press Ctrl-C need children that a SIGINT stops, as under
# a terminal: handled here, SIGINT is reset to its default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The agents the tests start (memsight run's children, the agent tests' processes) write into a directory of
# the suite's own, never the machine's default one (/tmp/memsight-<uid>, $XDG_RUNTIME_DIR/memsight): a
# memsight the developer keeps open would list them, and its figures would no longer be the experiment's.
# Every process a test starts with the suite's environment inherits it; a test that builds its own names it.
AGENT_DIR = os.environ.setdefault("MEMSIGHT_AGENT_DIR", tempfile.mkdtemp(prefix="memsight-test-agents-"))
atexit.register(shutil.rmtree, AGENT_DIR, ignore_errors=True)

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
SHARED_CONFIGS = SHARED / "configs"
SHARED_FIXTURES = SHARED / "fixtures"
HANG_GUARD_S = 60  # a hang guard for the CLI in a subprocess, not a speed check


# scripts/test.sh runs the suite on three pytest-xdist workers (--dist loadgroup: each test is handed, in
# collection order, to the first worker with room). The tests that take longest (each starts torch and
# transformers in processes of its own, or waits seconds on a real command) are collected first, so that every
# worker starts on them and the short tests fill in around them, rather than one of them starting last and
# running alone at the end. A name here that no longer matches only loses its place; no test is left out.
RUN_FIRST = (
    "tests/tui/test_lab.py::test_edge_is_the_largest_batch_that_really_holds",
    "tests/collectors/test_gpu_check.py::test_cpu_smoke_run_executes_every_code_path_with_exact_figures",
    "tests/tui/test_lab.py::test_fragment_records_three_gap_series",
    "tests/tui/test_lab.py::test_two_processes_and_the_second_process_alert_in_the_recording",
    "tests/collectors/test_footprint.py::test_the_builders_memory_stops_growing_once_its_chart_history_is_full",
    "tests/tui/test_run_lifecycle.py::test_a_run_keeps_its_agents_figures_after_the_command_exits",
    "tests/collectors/test_autotrack_run.py",
    "tests/collectors/test_autotrack.py",
    "tests/tui/test_lab.py",
    "tests/tui/test_run_scope.py",
    "tests/collectors/test_run_replay_alerts.py",
    "tests/collectors/test_recording_format.py::test_format1_recordings_replay_exactly_as_the_format1_reader_did",
    "tests/tui/test_app.py::test_every_screen_at_each_size_and_resizing",
    "tests/tui/test_plan_fields.py",
    "tests/collectors/test_flight.py",
)


def pytest_collection_modifyitems(config, items):
    """The longest tests first (RUN_FIRST, in its order); the rest keep their order."""

    def rank(item) -> int:
        return next((i for i, name in enumerate(RUN_FIRST) if item.nodeid.startswith(name)), len(RUN_FIRST))

    items.sort(key=rank)  # stable: within a rank, collection order


def run_memsight(*args: str, **popen_kwargs) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, no stdin; a hang fails the test (TimeoutExpired) instead of blocking the
    suite."""
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        stdin=subprocess.DEVNULL,
        **popen_kwargs,
    )

def load_script(name: str):
    """scripts/NAME.py as a module (scripts/ is not a package); registered in sys.modules first, so its
    dataclasses resolve their string annotations."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _run_logs_in_the_checkout() -> set[str]:
    return {path.name for path in REPO_ROOT.glob("memsight-run-*.log")}


@pytest.fixture(autouse=True, scope="session")
def _no_run_log_left_in_the_checkout():
    """`memsight run` copies CMD's output to ./memsight-run-PID.log (the UI, and headless --record): a test
    that runs it from the checkout leaves that file in the user's working tree. Such tests run it from a
    temporary directory; this fails the run, naming the files, when one does not."""
    before = _run_logs_in_the_checkout()
    yield
    left = sorted(_run_logs_in_the_checkout() - before)
    assert not left, f"tests left memsight run's output logs in the checkout: {left} (run them in tmp_path)"


@pytest.fixture(autouse=True, scope="session")
def _flight_recordings_stay_in_the_test_run(tmp_path_factory):
    """`memsight run` keeps a flight recording under $XDG_STATE_HOME by default: the test run's memsight
    processes (subprocesses inherit it) keep theirs in a temporary directory, not the user's home."""
    previous = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("xdg-state"))
    yield
    if previous is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = previous


needs_shared = pytest.mark.skipif(
    not SHARED_CONFIGS.is_dir(),
    reason="../shared/ (real configs and recorded fixtures) is not beside this checkout",
)


def installed(module: str) -> bool:
    """Whether `module` can be imported here, without importing it (torch takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def needs_torch(why: str) -> pytest.MarkDecorator:
    """Skip where torch is absent (the monitor's own install has none), saying what needed it: for tests whose
    child processes import torch, which importorskip in the test process would not see."""
    return pytest.mark.skipif(not installed("torch"), reason=f"torch is not installed: {why}")
