"""Agent overhead on a CPU loop of small torch operations: agent off vs on at 10 Hz and 100 Hz, in one run.

Repetitions are interleaved (off, 10 Hz, 100 Hz, off, ...) so drift and other load hit every setting
alike; the report is the median time per repetition and the ratio on/off. Target: ratio < 1.01.
The agent tracks a model and a growing KV list, so each tick does the work it does in a real decode loop
(on this CPU-only machine there is no memory_stats() call: CUDA is never initialized).

    python bench/agent_overhead.py [--reps 9] [--iters 3000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from collectors import agent_format as fmt  # noqa: E402
from collectors.agent import DEFAULT_CPU_BUDGET, Agent  # noqa: E402
from collectors.ring import Ring  # noqa: E402
from collectors.state import AGENT_FIELDS, OS_FIELDS  # noqa: E402


def workload(
    iters: int, x: torch.Tensor, w: torch.Tensor, kv: list[torch.Tensor]
) -> tuple[float, float]:
    """Wall time and this (main) thread's CPU time of the loop. Wall time is what the experiment feels;
    thread CPU time leaves out what a shared VM's host steals, so it stays readable when wall time is not."""
    t0, c0 = time.perf_counter(), time.thread_time()
    for i in range(iters):
        y = torch.nn.functional.silu(x @ w) + x
        x = y * 0.5
        if i % 1000 == 0:  # a KV list growing to tens of tensors, walked every tick
            kv.append(torch.zeros(1, 4, 8, 16))
    return time.perf_counter() - t0, time.thread_time() - c0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=31)
    p.add_argument("--iters", type=int, default=30000)
    args = p.parse_args()
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(8)))
    x, w = torch.randn(16, 64), torch.randn(64, 64) * 0.1
    # "off (control)" is a second agent-off setting: its ratio to "off" is this machine's noise floor, so a
    # reader can tell a real overhead from run-to-run jitter.
    times: dict[str, list[float]] = {"off": [], "off (control)": [], "10 Hz": [], "100 Hz": []}
    ticks: dict[str, int] = {"10 Hz": 0, "100 Hz": 0}
    costs: dict[str, list[float]] = {"10 Hz": [], "100 Hz": []}
    main_cpu: dict[str, list[float]] = {setting: [] for setting in times}
    agent_cpu: dict[str, float] = {"10 Hz": 0.0, "100 Hz": 0.0}  # CPU seconds spent in the agent thread
    achieved: dict[str, list[float]] = {"10 Hz": [], "100 Hz": []}  # the rate the CPU budget allowed
    workload(args.iters, x, w, [])  # warm up
    with tempfile.TemporaryDirectory() as directory:
        settings = list(times)
        for rep in range(args.reps):
            # rotate the order each round so no setting always runs first (caches, frequency scaling)
            shift = rep % len(settings)
            for setting in settings[shift:] + settings[:shift]:
                kv: list[torch.Tensor] = []
                agent = None
                if not setting.startswith("off"):
                    agent = Agent(hz=float(setting.split()[0]), directory=directory)
                    agent.track_model(model)
                    agent.track_kv(kv)
                    agent.start()
                    time.sleep(0.05)  # file creation and the first tick are start-up, not loop overhead
                    clock = time.pthread_getcpuclockid(agent._thread.ident)  # noqa: SLF001
                    cpu0 = time.clock_gettime(clock)
                wall, cpu = workload(args.iters, x, w, kv)
                times[setting].append(wall)
                main_cpu[setting].append(cpu)
                if agent is not None:
                    agent_cpu[setting] += time.clock_gettime(clock) - cpu0
                    achieved[setting].append(agent.effective_hz)
                    ticks[setting] += agent._fine_count  # noqa: SLF001
                    if agent._last_tick_cost == agent._last_tick_cost:  # noqa: SLF001
                        costs[setting].append(agent._last_tick_cost)  # noqa: SLF001
                    agent.stop()
    off = statistics.median(times["off"])
    print(
        f"torch {torch.__version__}, {args.reps} interleaved repetitions of {args.iters} iterations, 1 thread"
    )
    print(f"  agent off      : median {off * 1e3:8.2f} ms")
    for setting in ("off (control)", "10 Hz", "100 Hz"):
        # per-round ratios compare runs made seconds apart: less sensitive to slow drifts in machine load
        ratios = sorted(a / b for a, b in zip(times[setting], times["off"], strict=True))
        q1, median_ratio, q3 = statistics.quantiles(ratios, n=4)
        med = statistics.median(times[setting])
        cpu_ratio = statistics.median(main_cpu[setting]) / statistics.median(main_cpu["off"])
        line = (
            f"  {setting:>15}: median {med * 1e3:8.2f} ms  ratio {med / off:.4f}  "
            f"(per-round ratios: median {median_ratio:.4f}, IQR {q1:.4f}-{q3:.4f}); "
            f"main-thread CPU ratio {cpu_ratio:.4f}"
        )
        if setting in agent_cpu:
            share = agent_cpu[setting] / sum(times[setting])
            cost = statistics.median(costs[setting]) * 1e6 if costs[setting] else float("nan")
            line += (
                f"\n{'':19}agent thread CPU {share * 100:.2f}% of the loop's time "
                f"({ticks[setting]} records, median tick {cost:.0f} us); rate held by its CPU budget "
                f"({DEFAULT_CPU_BUDGET:.1%} of a core): median {statistics.median(achieved[setting]):.0f} Hz"
            )
        print(line)
    day_records = 24 * 3600 * 10
    print(
        f"ring storage for a day at 10 Hz (fixed, preallocated): agent ring file "
        f"{fmt.file_size():,} B (fine {fmt.FINE_CAPACITY} records + coarse {fmt.COARSE_CAPACITY} x "
        f"{fmt.COARSE_STEP_S:.0f} s; {day_records:,} records/day pass through it); monitor rings: OS "
        f"{Ring.bytes_for(len(OS_FIELDS)):,} B, per agent device {Ring.bytes_for(len(AGENT_FIELDS)):,} B"
    )
    print(f"  (unbounded it would be {day_records * fmt.SLOT_SIZE:,} B/day of agent records per device)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
