"""Cold-start wall time of `memsight plan llama-3.1-8b`, beside another calculator measured in the same run.

Each run is a fresh subprocess (a cold interpreter, warm disk cache); we report the median of several runs.
The comparison is `accelerate estimate-memory` pointed at a local folder holding the same config.json (no
network), from a scratch venv; if that is not installed, transformers' meta-device build of the same config
(what accelerate does inside). Run by hand:

    python bench/plan_cold_start.py [--runs 7] [--accelerate /tmp/accvenv/bin/accelerate]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def timed(
    cmd: list[str], env: dict[str, str], cwd: pathlib.Path
) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start, done


def median_of(
    cmd: list[str], runs: int, env: dict[str, str], cwd: pathlib.Path
) -> tuple[float, list[float], str]:
    times = []
    out = ""
    for _ in range(runs):
        seconds, done = timed(cmd, env, cwd)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        times.append(seconds)
        out = done.stdout
    return statistics.median(times), times, out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--accelerate", default="/tmp/accvenv/bin/accelerate")
    parser.add_argument("--python-for-transformers", default="/tmp/accvenv/bin/python")
    args = parser.parse_args()

    from planner.catalog import catalog_config  # the same config the planner uses

    config = catalog_config(args.model)
    if config is None:
        raise SystemExit(f"{args.model} is not a catalog name")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")

    ours_cmd = [sys.executable, "-m", "tui.cli", "plan", args.model, "--json"]
    ours, ours_all, out = median_of(ours_cmd, args.runs, env, REPO)
    params = json.loads(out)["params_total"]

    with tempfile.TemporaryDirectory() as folder:
        (pathlib.Path(folder) / "config.json").write_text(json.dumps(config))
        accelerate = shutil.which(args.accelerate) or (
            args.accelerate if os.path.exists(args.accelerate) else None
        )
        other_cmd: list[str] = []
        if accelerate:
            label = "accelerate estimate-memory (local config folder)"
            other_cmd = [accelerate, "estimate-memory", folder, "--library_name", "transformers"]
            _, probe = timed(other_cmd, env, pathlib.Path(folder))
            if probe.returncode != 0:
                last = (probe.stderr.strip().splitlines() or ["(no message)"])[-1]
                print(f"accelerate estimate-memory does not take a local folder offline: {last[:160]}")
                other_cmd = []
        if not other_cmd:
            label = "transformers meta-device build (what accelerate does inside)"
            code = (
                "import sys, torch; from transformers import AutoConfig, AutoModelForCausalLM; "
                "c = AutoConfig.from_pretrained(sys.argv[1])\n"
                "with torch.device('meta'): m = AutoModelForCausalLM.from_config(c)\n"
                "print(sum(p.numel() for p in m.parameters()))"
            )
            other_cmd = [args.python_for_transformers, "-c", code, folder]
        other, other_all, other_out = median_of(other_cmd, args.runs, env, pathlib.Path(folder))

    print(
        f"model: {args.model} ({params:,} parameters by memsight), "
        f"{args.runs} cold runs each, median wall time"
    )
    print(
        f"  memsight plan --json : {ours * 1000:8.1f} ms   "
        f"runs: {', '.join(f'{t * 1000:.0f}' for t in ours_all)}"
    )
    print(f"  {label}: {other * 1000:8.1f} ms   runs: {', '.join(f'{t * 1000:.0f}' for t in other_all)}")
    print(f"  ratio (other / memsight): {other / ours:.1f}x")
    print("  other tool's output (last run):")
    for line in other_out.strip().splitlines()[-12:]:
        print(f"    {line}")
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
