"""Time to read a vLLM /metrics body of N lines (`vllm_snapshot_from_text`: prometheus_client's parser and
memsight's wrapper), for growing N: linear means the time per line stays flat. Three shapes: one family per
sample (TYPE line each), untyped samples, and one vLLM model_name per sample. Median of 3 runs each.

    python bench/vllm_parse.py [--lines 4000 16000 64000]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collectors.vllm_metrics import vllm_snapshot_from_text  # noqa: E402

SHAPES = {
    "families": lambda n: "".join(f"# TYPE m{i} gauge\nm{i} {i}\n" for i in range(n)),
    "untyped": lambda n: "".join(f"m{i} {i}\n" for i in range(n)),
    "models": lambda n: "".join(f'vllm:num_requests_running{{model_name="m{i}"}} {i}\n' for i in range(n)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[4000, 16000, 64000])
    args = parser.parse_args()
    print(f"{'shape':<10} {'samples':>8} {'MiB':>6} {'median s':>9} {'us/sample':>10}")
    for shape, make in SHAPES.items():
        for n in args.lines:
            text = make(n)
            runs = []
            for _ in range(3):
                began = time.perf_counter()
                vllm_snapshot_from_text(text)
                runs.append(time.perf_counter() - began)
            median = statistics.median(runs)
            print(f"{shape:<10} {n:>8} {len(text) / 2**20:>6.2f} {median:>9.3f} {median / n * 1e6:>10.1f}")


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
