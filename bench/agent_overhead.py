"""Agent overhead on a CPU loop of small torch operations: agent off vs on at 10 Hz and 100 Hz, in one run.

Each round runs every setting once, in a fresh random order, as one block of the same loop; the agent of a
block starts before it at a random phase, so its ticks land anywhere in the block. Two more settings say what
the numbers mean:

- "off (control)" is a second agent-off setting: its ratio to "off" is this machine's noise floor.
- "bare thread 100 Hz" is a thread that only wakes 100 times a second and does nothing: the cost of *any*
  in-process sampler thread at that rate (each wake-up takes the GIL from the experiment's thread).
- "100 Hz, no budget" is the agent with its CPU budget off, so it really ticks at 100 Hz.

Figure of merit (target < 1.01): the ratio of the 10th-percentile block time with the setting to the one with
the agent off, with a 95% bootstrap interval over rounds. The noise of a shared VM only ever lengthens a block
(a neighbour's load), so the fastest blocks are the ones it left alone, while the agent's ticks are in every
block; the control's ratio shows how well that holds on the day. The ratio of medians is printed too (it
reads every block, and on a noisy host its interval is several times wider). The agent's thread CPU, its
records per second and the rate its budget held are printed beside.

    python bench/agent_overhead.py [--rounds 120] [--iters 20000] [--json runs.json]
    python bench/agent_overhead.py --transformers [--rounds 30] [--batch 4] [--new 64]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from collectors import agent_format as fmt  # noqa: E402
from collectors.agent import DEFAULT_CPU_BUDGET, Agent  # noqa: E402

OFF, CONTROL, BARE = "off", "off (control)", "bare thread 100 Hz"
AGENT_SETTINGS = {"10 Hz": (10.0, DEFAULT_CPU_BUDGET), "100 Hz": (100.0, DEFAULT_CPU_BUDGET),
                  "100 Hz, no budget": (100.0, 0.0)}  # fmt: skip
SETTINGS = (OFF, CONTROL, *AGENT_SETTINGS, BARE)


def workload(iters: int, x: torch.Tensor, w: torch.Tensor, kv: list[torch.Tensor]) -> tuple[float, float]:
    """Wall time and this (main) thread's CPU time of the loop: wall time is what the experiment feels."""
    t0, c0 = time.perf_counter(), time.thread_time()
    for i in range(iters):
        y = torch.nn.functional.silu(x @ w) + x
        x = y * 0.5
        if i % 1000 == 0:  # a KV list growing to tens of tensors, walked by the agent
            kv.append(torch.zeros(1, 4, 8, 16))
    return time.perf_counter() - t0, time.thread_time() - c0


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def p10(values: list[float]) -> float:
    return quantile(values, 0.10)


def bootstrap_ratio(
    statistic, on: list[float], off: list[float], rng: random.Random, n: int = 1000
) -> tuple[float, float]:
    """95% interval of statistic(on) / statistic(off), resampling whole rounds (a round's blocks ran
    together)."""
    rounds = len(off)
    ratios = []
    for _ in range(n):
        pick = [rng.randrange(rounds) for _ in range(rounds)]
        ratios.append(statistic([on[i] for i in pick]) / statistic([off[i] for i in pick]))
    ratios.sort()
    return ratios[int(0.025 * n)], ratios[int(0.975 * n) - 1]


def bare_thread(stop: threading.Event) -> None:
    while not stop.wait(0.01):
        pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=120)
    p.add_argument("--iters", type=int, default=20000, help="loop iterations per block (~0.2 s here)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="write every block's times here")
    p.add_argument(
        "--transformers",
        action="store_true",
        help="the 'transformers generate' setting instead: a tiny Llama generating on the CPU, agent off / "
        "on / on with the automatic tracking's per-forward hooks (rounds default 30)",
    )
    p.add_argument("--batch", type=int, default=4, help="--transformers: sequences per generate()")
    p.add_argument("--new", type=int, default=64, help="--transformers: new tokens per generate()")
    return p


@dataclass
class _Tally:
    """Every block's times by setting, and what the agent did inside its blocks."""

    wall: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SETTINGS})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SETTINGS})
    # CPU seconds of the agent thread inside the blocks
    agent_cpu: dict[str, float] = field(default_factory=lambda: dict.fromkeys(AGENT_SETTINGS, 0.0))
    records: dict[str, int] = field(default_factory=lambda: dict.fromkeys(AGENT_SETTINGS, 0))
    held_hz: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in AGENT_SETTINGS})


def main() -> int:
    args = _parser().parse_args()
    if args.transformers:
        if args.rounds == 120:
            args.rounds = 30
        return transformers_main(args)
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    model = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(8)))
    x, w = torch.randn(16, 64), torch.randn(64, 64) * 0.1
    tally = _Tally()
    workload(args.iters // 4, x, w, [])  # warm up
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(args.rounds):
            order = list(SETTINGS)
            rng.shuffle(order)
            for setting in order:
                _run_block(setting, model, x, w, args.iters, directory, rng, tally)
    _print_report(args, tally, time.perf_counter() - started, rng)
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "wall": tally.wall, "cpu": tally.cpu})
        )
    return 0


def _start_setting(
    setting: str, model: torch.nn.Module, kv: list[torch.Tensor], directory: str, stop: threading.Event
) -> tuple[Agent | None, threading.Thread | None]:
    """What runs beside the loop in `setting`, started: an agent tracking `model` and `kv`, a bare thread
    (until `stop`), or neither."""
    if setting in AGENT_SETTINGS:
        hz, budget = AGENT_SETTINGS[setting]
        agent = Agent(hz=hz, directory=directory, cpu_budget=budget)
        agent.track_model(model)
        agent.track_kv(kv)
        agent.start()
        return agent, None
    if setting == BARE:
        thread = threading.Thread(target=bare_thread, args=(stop,), daemon=True)
        thread.start()
        return None, thread
    return None, None


def _run_block(
    setting: str,
    model: torch.nn.Module,
    x: torch.Tensor,
    w: torch.Tensor,
    iters: int,
    directory: str,
    rng: random.Random,
    tally: _Tally,
) -> None:
    """One block of the loop in `setting`; its times, and its agent's CPU, records and rate, go to `tally`."""
    kv: list[torch.Tensor] = []
    stop = threading.Event()
    agent, thread = _start_setting(setting, model, kv, directory, stop)
    # file creation and the first tick are start-up, not loop cost; the random part puts the
    # ticks at any phase of the block
    time.sleep(0.03 + rng.random() * 0.1)
    if agent is not None:
        clock = time.pthread_getcpuclockid(agent._thread.ident)  # noqa: SLF001
        cpu0, count0 = time.clock_gettime(clock), agent._fine_count  # noqa: SLF001
    block_wall, block_cpu = workload(iters, x, w, kv)
    tally.wall[setting].append(block_wall)
    tally.cpu[setting].append(block_cpu)
    if agent is not None:
        tally.agent_cpu[setting] += time.clock_gettime(clock) - cpu0
        tally.records[setting] += agent._fine_count - count0  # noqa: SLF001
        tally.held_hz[setting].append(agent.effective_hz)
        agent.stop()
    if thread is not None:
        stop.set()
        thread.join()


def _print_report(args: argparse.Namespace, tally: _Tally, elapsed: float, rng: random.Random) -> None:
    wall = tally.wall
    print(
        f"torch {torch.__version__}, 1 thread; {args.rounds} rounds x {len(SETTINGS)} settings in random "
        f"order, {args.iters} iterations per block; {elapsed:.0f} s"
    )
    print(
        f"  {'agent off':>19}: block p10 {p10(wall[OFF]) * 1e3:7.2f} ms, "
        f"median {statistics.median(wall[OFF]) * 1e3:7.2f} ms"
    )
    verdicts = []
    for setting in SETTINGS[1:]:
        line, verdict = _setting_line(setting, tally, rng)
        if verdict is not None:
            verdicts.append(verdict)
        print(line)
    print(
        f"target p10 ratio < 1.01 with the default budget ({DEFAULT_CPU_BUDGET:.2%} of a core): "
        + "; ".join(verdicts)
    )
    day_records = 24 * 3600 * 10
    print(
        f"ring storage for a day at 10 Hz (fixed, preallocated): agent ring file "
        f"{fmt.file_size():,} B (fine {fmt.FINE_CAPACITY} records + coarse {fmt.COARSE_CAPACITY} x "
        f"{fmt.COARSE_STEP_S:.0f} s; {day_records:,} records/day pass through it)"
    )
    print(f"  (unbounded it would be {day_records * fmt.SLOT_SIZE:,} B/day of agent records per device)")


def _setting_line(setting: str, tally: _Tally, rng: random.Random) -> tuple[str, str | None]:
    """The report's line(s) for `setting` against the agent off, and its verdict against the target (None:
    not an agent setting with the default budget)."""
    wall = tally.wall
    ratios = {}
    for name, statistic in (("p10", p10), ("median", statistics.median)):
        low, high = bootstrap_ratio(statistic, wall[setting], wall[OFF], rng)
        ratios[name] = (statistic(wall[setting]) / statistic(wall[OFF]), low, high)
    cpu_ratio = p10(tally.cpu[setting]) / p10(tally.cpu[OFF])
    (r10, lo10, hi10), (rmed, lomed, himed) = ratios["p10"], ratios["median"]
    line = (
        f"  {setting:>19}: p10 ratio {r10:.4f} (95% CI {lo10:.4f}-{hi10:.4f}); median ratio {rmed:.4f} "
        f"(95% CI {lomed:.4f}-{himed:.4f}); main-thread CPU p10 ratio {cpu_ratio:.4f}"
    )
    verdict = None
    if setting in AGENT_SETTINGS:
        seconds = sum(wall[setting])
        line += (
            f"\n{'':23}agent: {tally.records[setting] / seconds:.1f} records/s, thread CPU "
            f"{tally.agent_cpu[setting] / seconds * 100:.2f}% of a core, rate held by its budget "
            f"{statistics.median(tally.held_hz[setting]):.0f} Hz"
        )
        if AGENT_SETTINGS[setting][1] > 0:
            verdict = f"{setting}: {r10:.4f} (CI up to {hi10:.4f})"
    return line, verdict


# ------------------------------------------------------------------------------------ transformers generate
TF_OFF, TF_CONTROL = "off", "off (control)"
TF_AGENT, TF_HOOKS = "agent 10 Hz", "agent 10 Hz + autotrack hooks"
TF_SETTINGS = (TF_OFF, TF_CONTROL, TF_AGENT, TF_HOOKS)


def transformers_main(args: argparse.Namespace) -> int:
    """The "transformers generate" setting: the demo's tiny Llama (collectors/data/
    demo_transformers_config.json) generating greedily on the CPU, blocks of one generate() call each, agent
    off / on / on with the automatic tracking's hooks on the model (the per-forward prefill/decode hooks).
    Also the hooks' own cost per forward call, timed directly."""
    import transformers  # noqa: PLC0415

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    model, ids = _tiny_llama(transformers, args.batch)
    _generate_block(model, ids, args.new)  # warm up
    wall: dict[str, list[float]] = {s: [] for s in TF_SETTINGS}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        _print_hooks_cost(model, ids, directory)
        if args.rounds < 1:
            return 0
        for _ in range(args.rounds):
            order = list(TF_SETTINGS)
            rng.shuffle(order)
            for setting in order:
                wall[setting].append(_tf_block(setting, model, ids, args.new, directory, rng))
    _print_tf_report(transformers.__version__, args, model, wall, started, rng)
    return 0


def _tiny_llama(transformers, batch: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """The demo's tiny Llama, its weights from seed 0, and a batch of 16-token prompts for it."""
    here = Path(__file__).resolve().parent.parent / "collectors" / "data" / "demo_transformers_config.json"
    config = transformers.LlamaConfig(**json.loads(here.read_text()))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(0, config.vocab_size, (batch, 16))
    return model, ids


def _generate_block(model: torch.nn.Module, ids: torch.Tensor, new: int) -> tuple[float, float]:
    """Wall time and this thread's CPU time of one greedy generate() of exactly `new` tokens."""
    t0, c0 = time.perf_counter(), time.thread_time()
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                       min_new_tokens=new, do_sample=False)  # fmt: skip
    return time.perf_counter() - t0, time.thread_time() - c0


def _print_hooks_cost(model: torch.nn.Module, ids: torch.Tensor, directory: str) -> None:
    """The hooks' own cost: one pre + post pair per forward call, timed on the model's real hook pair."""
    from collectors.autotrack import AutoTracker  # noqa: PLC0415

    agent = Agent(hz=10, directory=directory)
    agent.open()
    tracker = AutoTracker(agent)
    tracker.on_model(model)
    one = {"input_ids": ids[:, :1]}
    n = 20000
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        tracker._pre_forward(model, (), one)  # noqa: SLF001
        tracker._post_forward(model, (), one, None)  # noqa: SLF001
    per_forward = (time.perf_counter() - t0) / n
    per_forward_cpu = (time.thread_time() - c0) / n
    print(
        f"autotrack hooks, timed directly over {n:,} calls: {per_forward_cpu * 1e6:.2f} us of CPU per "
        f"forward call ({per_forward * 1e6:.2f} us wall, waiting for a busy CPU included), pre + post "
        f"hook, CPU probe: getrusage + /proc/self/statm",
        flush=True,
    )
    tracker._unhook(model)  # noqa: SLF001
    agent.stop()


def _tf_block(
    setting: str, model: torch.nn.Module, ids: torch.Tensor, new: int, directory: str, rng: random.Random
) -> float:
    """The wall time of one generate() block in `setting`, its agent (and hooks) started before it."""
    from collectors.autotrack import AutoTracker  # noqa: PLC0415

    agent = tracker = None
    if setting in (TF_AGENT, TF_HOOKS):
        agent = Agent(hz=10, directory=directory)
        agent.track_model(model)
        if setting == TF_HOOKS:
            tracker = AutoTracker(agent)
            agent.autotrack = tracker
            tracker.on_model(model)  # what the patched post_init does for a model it sees built
        agent.start()
    time.sleep(0.03 + rng.random() * 0.1)
    block_wall, _ = _generate_block(model, ids, new)
    if tracker is not None:
        tracker._unhook(model)  # noqa: SLF001
    if agent is not None:
        agent.stop()
    return block_wall


def _print_tf_report(
    version: str,
    args: argparse.Namespace,
    model: torch.nn.Module,
    wall: dict[str, list[float]],
    started: float,
    rng: random.Random,
) -> None:
    calls = args.new
    print(
        f"transformers {version}, torch {torch.__version__}, 1 thread; tiny Llama "
        f"({sum(p.numel() for p in model.parameters()):,} parameters, fp32, CPU), generate batch "
        f"{args.batch}, "
        f"16 prompt + {args.new} new tokens per block ({calls} forward calls); {args.rounds} rounds x "
        f"{len(TF_SETTINGS)} settings in random order; {time.perf_counter() - started:.0f} s"
    )
    off = wall[TF_OFF]
    per_call = p10(off) / calls * 1e3
    print(f"  {'agent off':>30}: block p10 {p10(off) * 1e3:8.2f} ms ({per_call:.3f} ms per forward)")
    for setting in TF_SETTINGS[1:]:
        r = p10(wall[setting]) / p10(off)
        low, high = bootstrap_ratio(p10, wall[setting], off, rng)
        med = statistics.median(wall[setting]) / statistics.median(off)
        print(f"  {setting:>30}: p10 ratio {r:.4f} (95% CI {low:.4f}-{high:.4f}); median ratio {med:.4f}")


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    raise SystemExit(finish(main()))
