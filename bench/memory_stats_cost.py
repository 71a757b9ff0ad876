"""What the agent's read of the caching allocator's stats costs in Python, per tick and device.

torch.cuda.memory_stats() calls memory_stats_as_nested_dict() (C++: torch._C._cuda_memoryStats) and then
flattens the nested dict in Python: every entry joined with ".", sorted, put in an OrderedDict. The agent
instead takes the nested dict and picks the ten entries it reads (collectors.torch_stats.stats_from_nested).

This machine has no GPU, so the C++ call is replaced by one returning a nested dict with every key torch's
memory_stats() docstring lists (this torch's own: printed below), and torch's real flattening code runs on
it. The C++ part is the same for both ways and is not in these figures.

    python bench/memory_stats_cost.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.cuda.memory as cuda_memory  # noqa: E402

from collectors.torch_stats import STAT_KEYS, stats_from_nested  # noqa: E402

# the layout the docstring of torch.cuda.memory_stats() documents (checked against it below)
POOLED = (
    "allocated",
    "allocated_bytes",
    "segment",
    "reserved_bytes",
    "active",
    "active_bytes",
    "inactive_split",
    "inactive_split_bytes",
    "requested_bytes",
)
POOLS = ("all", "large_pool", "small_pool")
METRICS = ("current", "peak", "allocated", "freed")
COUNTERS = (
    "num_alloc_retries",
    "num_ooms",
    "num_sync_all_streams",
    "num_device_alloc",
    "num_device_free",
    "num_oom_rejections",
)


def documented_nested_stats() -> dict:
    nested: dict = {name: {pool: dict.fromkeys(METRICS, 1 << 33) for pool in POOLS} for name in POOLED}
    nested.update(dict.fromkeys(COUNTERS, 0))
    nested["max_split_size"] = (1 << 63) - 1
    nested["oversize_allocations"] = dict.fromkeys(METRICS, 0)
    nested["oversize_segments"] = dict.fromkeys(METRICS, 0)
    nested["reserved_bytes_by_private_pools"] = {}  # no private pools
    return nested


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20000)
    args = p.parse_args()
    doc = cuda_memory.memory_stats.__doc__ or ""
    missing = [
        name for name in (*POOLED, *COUNTERS, "max_split_size", "oversize_segments") if f'"{name}' not in doc
    ]
    if missing:
        print(
            f"this torch's memory_stats() docstring does not list {missing}: the layout here is out of date"
        )
        return 1
    nested = documented_nested_stats()
    cuda_memory.memory_stats_as_nested_dict = lambda device=None: nested  # the C++ call this machine lacks
    flat = cuda_memory.memory_stats(0)
    picked = stats_from_nested(cuda_memory.memory_stats_as_nested_dict(0))
    assert picked == {key: flat[key] for key in STAT_KEYS.values()}, "the picked entries differ from torch's"
    flatten_s = timeit.timeit(lambda: cuda_memory.memory_stats(0), number=args.calls) / args.calls
    pick_s = (
        timeit.timeit(
            lambda: stats_from_nested(cuda_memory.memory_stats_as_nested_dict(0)), number=args.calls
        )
        / args.calls
    )
    print(
        f"torch {torch.__version__}: a nested dict of {len(flat)} entries (the documented layout); "
        f"{args.calls} calls each"
    )
    print(f"  memory_stats() (torch's Python flattening): {flatten_s * 1e6:6.1f} us a call")
    print(f"  nested dict + stats_from_nested (the agent): {pick_s * 1e6:6.1f} us a call")
    print(f"  saved per tick and device: {(flatten_s - pick_s) * 1e6:.1f} us ({flatten_s / pick_s:.0f}x)")
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    raise SystemExit(finish(main()))
