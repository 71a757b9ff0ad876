#!/usr/bin/env bash
# The README's test counts, in the three settings a user meets (issue 23): this checkout as CI runs it (torch,
# ../shared beside it), a clean clone with no ../shared beside it (those tests skip with their reason), and an
# install without torch (the agent's tests skip with theirs). Three whole suites, one after the other: run it
# alone, not beside other suites. Prints each setting's pytest summary line, then the taken line.
#
#     bash scripts/test_counts.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== with ../shared and torch (bash scripts/test.sh, as CI)"
bash scripts/test.sh -p no:cacheprovider | tail -n 1 || true  # a count with failures is a count too

echo "== a clean clone with no ../shared beside it"
git clone -q "$root" "$work/alone/memsight"
bash "$work/alone/memsight/scripts/test.sh" -p no:cacheprovider | tail -n 1 || true

echo "== without torch (pip install -e '.[dev]', no agent extra), ../shared beside it"
python3 -m venv "$work/notorch"
"$work/notorch/bin/pip" install -q -e "$root[dev]"
"$work/notorch/bin/python" -m pytest -q -p no:cacheprovider | tail -n 1 || true

.venv/bin/python bench/taken.py
