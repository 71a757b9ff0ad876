"""A test that cannot run here skips with its reason, and the reason is true (issue 23): without torch (the
monitor's own install has none) a test whose children import torch skips instead of failing, and a skip
reason that says another test runs instead names a test that exists."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

from tests.conftest import REPO_ROOT

TESTS = REPO_ROOT / "tests"
TORCH_SKIPS = ('importorskip("torch"', "needs_torch(")
# `import torch` as code, or inside a child's code string ("import torch\n", "...\nimport torch")
IMPORTS_TORCH = re.compile(
    r"^\s*import torch\b|\\nimport torch\b|\bimport torch\\n|\"import torch", re.MULTILINE
)
TEST_DEF = re.compile(r"^(?:async )?def (test_\w+)\(", re.MULTILINE)
# runs pytest with torch unimportable (as in `pip install memsight` without the agent extra), whatever this
# environment has installed
WITHOUT_TORCH = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def _test_modules() -> list:
    return sorted(p for p in TESTS.rglob("test_*.py"))


def test_every_test_module_that_runs_torch_skips_where_torch_is_absent():
    """Torch in the test process or in a child's code string: either way the module says how it skips."""
    unguarded = []
    for path in _test_modules():
        text = path.read_text(encoding="utf-8")
        if IMPORTS_TORCH.search(text):
            if not any(guard in text for guard in TORCH_SKIPS):
                unguarded.append(str(path.relative_to(REPO_ROOT)))
    assert not unguarded, f"these import torch (here or in a child) and never skip without it: {unguarded}"


def test_the_run_scope_tests_skip_with_their_reason_without_torch():
    """The module that used to fail twice without torch (its children import it; the second test waited 90 s
    and raised UnboundLocalError) now skips both, saying why."""
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, "-q", "-rs", "-p", "no:cacheprovider",
         "tests/tui/test_run_scope.py"],  # fmt: skip
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 skipped" in proc.stdout, proc.stdout[-3000:]
    assert "torch is not installed: the child processes build a torch model" in proc.stdout


def _skip_reasons() -> list[tuple[str, int, str]]:
    """(file, line, reason) of every literal reason= given to a skip in the tests."""
    found = []
    for path in _test_modules() + [TESTS / "conftest.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    value = kw.value.value if isinstance(kw.value, ast.Constant) else None
                    if kw.arg == "reason" and isinstance(value, str):
                        found.append((str(path.relative_to(REPO_ROOT)), node.lineno, value))
    return found


def test_a_reason_that_says_another_test_runs_instead_names_one_that_exists():
    reasons = _skip_reasons()
    assert len(reasons) >= 4  # the scan finds the suite's reasons, not nothing
    defined = set()
    for path in _test_modules():
        defined |= set(TEST_DEF.findall(path.read_text(encoding="utf-8")))
    wrong = []
    for where, line, reason in reasons:
        if "instead" in reason:
            named = re.findall(r"\btest_\w+", reason)
            if not named or not set(named) <= defined:
                wrong.append(f"{where}:{line}: {reason!r}")
    assert not wrong, "skip reasons promising a test that does not exist:\n" + "\n".join(wrong)
