"""GPU check: planner predictions vs what the agent and NVML measure, on one NVIDIA GPU (< 5 minutes).

    python scripts/gpu_check.py [--quick]            # the check, on CUDA device 0
    python scripts/gpu_check.py --device cpu         # the same functions on the CPU with a tiny config

Needs torch with CUDA and transformers (4.4x or 5.x); no network (the model is built from a config with
random weights). It prints, each with its unit:
  1. CUDA context size: the driver's per-process usage (NVML) minus PyTorch's reserved, nothing allocated;
  2. weights: planner (planner.formats.weight_bytes) vs the agent's tracked parameter + buffer bytes
     (tracked − planner must equal the model's non-parameter buffers, the rotary inv_freq tables);
  3. KV growth per token: planner (planner.kv.kv_bytes_per_token) vs the tracked DynamicCache's growth,
     at a few batch sizes and lengths (exact: it must be equal);
  4. reserved − allocated over a long DynamicCache decode vs a StaticCache vs
     PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (each in its own subprocess), with each cache's
     final bytes against the planner's (a StaticCache holds max_cache_len tokens from its first update on);
  5. the agent's overhead on the decode loop (off vs on at 10 Hz and 100 Hz asked, interleaved, medians;
     the records per second its CPU budget allowed and the median tick, the allocator-stats read included);
  6. what NVML and the agent saw of a second process allocating memory (1 GiB on the GPU);
  7. where the pool is (collectors/pool.py) before and after allocating the same 1 GiB in this process: which
     /proc/meminfo part it lands in (on a GB10: none, the "not itemized" part, with NVML's per-process sum
     growing by it), and cudaMemGetInfo's free next to MemFree and MemAvailable (on a GB10 the first two
     should be one figure), with vLLM's start-up check (planner/engines/vllm/startup.py) on what was measured.
Without CUDA (and without --device cpu) it says so and exits 2.

`--device cpu` runs every transformers/torch code path above for real on the CPU (a Llama with hidden 64,
2 layers, 4 heads / 2 KV heads, vocab 128), so the GPU run is not their first run. What needs CUDA
(context size, memory_stats gaps, NVML) prints "n/a on CPU"; the exact figures (weights, KV per token,
StaticCache bytes) are checked and a mismatch makes it exit 1.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GiB, MiB = 2**30, 2**20
NA_CPU = "n/a on CPU"

# A Llama-shaped model small enough to build and run in seconds (about 1.1 B parameters).
LLAMA_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "rope_theta": 10000.0,
}

# The same architecture, tiny: the CPU smoke run of every code path (seconds, not minutes).
TINY_LLAMA_CONFIG = {
    **LLAMA_CONFIG,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
    "max_position_embeddings": 512,
}

# planner format / KV dtype name -> torch dtype attribute and the config's torch_dtype spelling
DTYPES = {"bf16": ("bfloat16", "bfloat16"), "fp32": ("float32", "float32")}

# LlamaConfig keys that are not constructor arguments (or are spelled differently across versions);
# the dtype is applied with .to(dtype) instead, the same way in 4.x and 5.x
_NOT_CONFIG_KWARGS = ("model_type", "architectures", "torch_dtype")


@dataclass(frozen=True, slots=True)
class Setup:
    """Where and how the check runs: the GPU check, or its CPU smoke run with the tiny config."""

    device: str  # "cuda" | "cpu"
    fmt: str  # planner weight format and KV dtype: "bf16" | "fp32"
    config: dict
    quick: bool = False

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def agent_device(self) -> int:
        # the agent records CUDA device 0 as device 0; tensors off CUDA count under device -1
        return 0 if self.cuda else -1

    @property
    def kv_cases(self) -> tuple[tuple[int, int, int], ...]:
        """(batch, prompt tokens, new tokens) for the KV growth check."""
        if not self.cuda:
            return ((1, 8, 4), (3, 16, 5))
        return ((1, 256, 64), (4, 1024, 64)) if self.quick else ((1, 256, 128), (4, 1024, 128), (8, 2048, 64))

    @property
    def frag(self) -> tuple[int, int, int, int]:
        """(batch, prompt, decode steps, memory_stats every n steps) of the reserved − allocated check."""
        if not self.cuda:
            return (2, 8, 12, 4)
        return (8, 64, 300 if self.quick else 1000, 50)

    @property
    def overhead(self) -> tuple[int, int, int]:
        """(batch, decode steps, rounds) of the agent overhead check."""
        return (4, 128, 3) if self.cuda else (2, 8, 1)

    @property
    def second_bytes(self) -> int:
        return GiB if self.cuda else 64 * MiB


def make_setup(device: str, fmt: str | None, quick: bool) -> Setup:
    chosen = fmt or "bf16"
    if chosen not in DTYPES:
        raise ValueError(f"unknown dtype {chosen!r}; known: {', '.join(DTYPES)}")
    base = LLAMA_CONFIG if device == "cuda" else TINY_LLAMA_CONFIG
    return Setup(device=device, fmt=chosen, config={**base, "torch_dtype": DTYPES[chosen][1]}, quick=quick)


# ------------------------------------------------------------------------------------ pure helpers
def cuda_problem(torch_module) -> str | None:
    """Why this check cannot run (None if it can)."""
    if torch_module is None:
        return "torch is not installed"
    if not torch_module.cuda.is_available():
        return (
            f"no CUDA device: torch {torch_module.__version__} reports torch.cuda.is_available() == False "
            "(this check needs one NVIDIA GPU; --device cpu runs its code paths on the CPU)"
        )
    return None


def predicted(config: dict, fmt: str = "bf16") -> dict[str, int]:
    """The planner's weights and KV bytes per token (per sequence) for the config, in a dtype."""
    from planner.formats import weight_bytes
    from planner.kv import kv_bytes_per_token
    from planner.spec import load_spec

    spec = load_spec(config)
    return {"weights": weight_bytes(spec, fmt).total, "kv_per_token": kv_bytes_per_token(spec, fmt)}


def predicted_kv(config: dict, fmt: str, tokens: int, batch: int) -> int:
    """The planner's KV bytes for `batch` sequences of `tokens` tokens."""
    from planner.kv import kv_bytes_for_sequence
    from planner.spec import load_spec

    return batch * kv_bytes_for_sequence(load_spec(config), tokens, fmt)


def per_token_growth(kv_before: int, kv_after: int, tokens: int, batch: int) -> float:
    """KV bytes added per token per sequence."""
    if tokens <= 0 or batch <= 0:
        raise ValueError("tokens and batch must be positive")
    return (kv_after - kv_before) / (tokens * batch)


def ratio_line(name: str, predicted_value: float, measured: float | None, unit: str = "B") -> str:
    if measured is None:
        return f"{name:<34} predicted {predicted_value:>16,.0f} {unit}   measured        unknown"
    diff = (measured - predicted_value) / predicted_value * 100 if predicted_value else float("nan")
    return (
        f"{name:<34} predicted {predicted_value:>16,.0f} {unit}   measured {measured:>16,.0f} {unit}   "
        f"({diff:+.3f}%)"
    )


def verdict(equal: bool) -> str:
    return "exact" if equal else "MISMATCH"


def gib(n: float | None) -> str:
    return "unknown" if n is None else f"{n / GiB:.3f} GiB"


# ------------------------------------------------------------------------------------ transformers 4.x / 5.x
def hf_config(config: dict):
    from transformers import LlamaConfig

    return LlamaConfig(**{k: v for k, v in config.items() if k not in _NOT_CONFIG_KWARGS})


def torch_dtype(fmt: str):
    import torch

    return getattr(torch, DTYPES[fmt][0])


def build_model(setup: Setup):
    """LlamaForCausalLM with random weights, built on the device (no host copy), in the setup's dtype."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device(setup.device):
        model = LlamaForCausalLM(hf_config(setup.config)).to(torch_dtype(setup.fmt)).eval()
    return model


def cache_kwarg(model) -> str:
    """The forward keyword for the KV cache: `cache` in transformers 5.x (where `past_key_values` is
    deprecated, to be removed), `past_key_values` in 4.x."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def forward(model, ids, cache, position: int):
    """One forward pass that fills `cache` at positions position .. position + len - 1."""
    import torch

    positions = torch.arange(position, position + ids.shape[1], device=ids.device)
    return model(ids, use_cache=True, cache_position=positions, **{cache_kwarg(model): cache})


def next_tokens(out):
    return out.logits[:, -1:].argmax(-1)


def dynamic_cache():
    from transformers import DynamicCache

    return DynamicCache()


def static_cache(setup: Setup, model, batch: int, max_cache_len: int):
    """A StaticCache for `batch` sequences of up to max_cache_len tokens. 4.4x takes max_batch_size,
    device and dtype and allocates at construction; 4.56+/5.x take (config, max_cache_len) and allocate
    every layer in full at its first update, with the batch, device and dtype of the keys."""
    from transformers import StaticCache

    accepted = inspect.signature(StaticCache.__init__).parameters
    offered = {
        "max_batch_size": batch,
        "device": setup.device,
        "dtype": torch_dtype(setup.fmt),
    }
    kwargs = {k: v for k, v in offered.items() if k in accepted}
    return StaticCache(config=model.config, max_cache_len=max_cache_len, **kwargs)


def buffer_bytes(model) -> dict[str, int]:
    """Non-parameter buffers (name -> bytes), each tensor once: the agent's weights include them, the
    planner's do not (for a Llama: the rotary inv_freq table(s), 4.x one, 5.x also original_inv_freq)."""
    parameters = {id(p) for p in model.parameters()}
    out: dict[str, int] = {}
    seen: set[int] = set()
    for name, buffer in model.named_buffers():
        if id(buffer) in parameters or id(buffer) in seen:
            continue
        seen.add(id(buffer))
        out[name] = int(buffer.nbytes)
    return out


# ------------------------------------------------------------------------------------ torch / NVML parts
def synchronize(setup: Setup) -> None:
    if setup.cuda:
        import torch

        torch.cuda.synchronize()


def nvml_used_by_pid(pid: int) -> int | None:
    """The driver's per-process usage of `pid` (None: NVML unavailable, or the pid is not in its list,
    e.g. inside a container's pid namespace)."""
    from collectors.nvml_collector import NVMLCollector, gpu_bytes_by_pid

    collector = NVMLCollector(process_interval_s=0.0)
    try:
        snap = collector.sample()
        return gpu_bytes_by_pid(snap).get(pid) if snap.available else None
    finally:
        collector.close()


def last_record(reader, device: int):
    """The newest record of `device` among those written since the last read."""
    records = [r for r in reader.read_new().records if r.device == device]
    if not records:
        raise RuntimeError(f"the agent wrote no record for device {device} (ring {reader.path})")
    return records[-1]


def measure(agent, reader, setup: Setup, label: str):
    """Tick the agent now and return its record. mark_step makes it re-walk the tracked caches instead
    of reusing a walk from the last kv_refresh_s."""
    synchronize(setup)
    agent.mark_step(label)
    agent.tick()
    return last_record(reader, setup.agent_device)


def cuda_context(setup: Setup) -> str:
    if not setup.cuda:
        return f"1. CUDA context (NVML per-process used − reserved, 1 tensor): {NA_CPU}"
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    time.sleep(0.5)
    driver = nvml_used_by_pid(os.getpid())
    reserved = torch.cuda.memory_reserved()
    context = None if driver is None else driver - reserved
    # device-wide as well: NVML's per-process list may not show our pid (a container's pid namespace);
    # on a GPU nobody else uses, total − free − reserved is the same context
    free, total = torch.cuda.mem_get_info()
    return (
        f"1. CUDA context (NVML per-process used − reserved, 1 tensor): {gib(context)} "
        f"(driver {gib(driver)}, reserved {gib(reserved)}); device-wide total − free − reserved "
        f"{gib(total - free - reserved)} (includes any other process on the GPU)"
    )


def check_weights(setup: Setup, model, agent, reader, pred: dict[str, int]) -> tuple[list[str], bool]:
    agent.track_model(model)
    rec = measure(agent, reader, setup, "weights")
    buffers = buffer_bytes(model)
    extra = sum(buffers.values())
    tracked = rec.weights_bytes
    ok = tracked == pred["weights"] + extra
    names = ", ".join(f"{name} {size:,} B" for name, size in buffers.items()) or "none"
    return [
        ratio_line(f"2. weights ({setup.fmt})", pred["weights"], tracked),
        f"   agent tracked {tracked:,} B = planner {pred['weights']:,} B + non-parameter buffers "
        f"{extra:,} B ({names}): {verdict(ok)}",
    ], ok


def check_kv_growth(setup: Setup, model, agent, reader, pred: dict[str, int]) -> tuple[list[str], bool]:
    import torch

    vocab = model.config.vocab_size
    lines = [f"3. KV bytes per token per sequence ({setup.fmt}): predicted {pred['kv_per_token']:,} B"]
    ok = True
    for batch, prompt, new in setup.kv_cases:
        cache = dynamic_cache()
        agent.track_kv(cache)
        with torch.inference_mode():
            ids = torch.randint(0, vocab, (batch, prompt), device=setup.device)
            out = forward(model, ids, cache, 0)
            kv0 = measure(agent, reader, setup, f"prefill b{batch}").kv_bytes
            for i in range(new):
                out = forward(model, next_tokens(out), cache, prompt + i)
            kv1 = measure(agent, reader, setup, f"decode b{batch}").kv_bytes
        measured = per_token_growth(kv0, kv1, new, batch)
        exact = measured == pred["kv_per_token"]
        whole = kv1 == predicted_kv(setup.config, setup.fmt, prompt + new, batch)
        ok = ok and exact and whole
        lines.append(
            "   "
            + ratio_line(f"batch {batch}, prompt {prompt}, +{new}", pred["kv_per_token"], measured)
            + f"   {verdict(exact)}; whole cache {kv1:,} B {verdict(whole)}"
        )
        agent.untrack(cache)
        del cache, out
    return lines, ok


def check_overhead(setup: Setup, model, agent_dir: str) -> str:
    import torch

    from collectors.agent import Agent

    batch, steps, rounds = setup.overhead
    vocab = model.config.vocab_size

    def decode(n: int) -> float:
        cache = dynamic_cache()
        with torch.inference_mode():
            out = forward(model, torch.randint(0, vocab, (batch, 128), device=setup.device), cache, 0)
            synchronize(setup)
            t0 = time.perf_counter()
            for i in range(n):
                out = forward(model, next_tokens(out), cache, 128 + i)
            synchronize(setup)
            return time.perf_counter() - t0

    rates = (10.0, 100.0)
    times: dict[float, list[float]] = {0.0: [], **{hz: [] for hz in rates}}
    records: dict[float, float] = dict.fromkeys(rates, 0.0)
    costs: dict[float, list[float]] = {hz: [] for hz in rates}
    decode(min(16, steps))  # warm-up (kernels, allocator)
    for _ in range(rounds):
        times[0.0].append(decode(steps))
        for hz in rates:
            agent = Agent(hz=hz, directory=agent_dir)
            agent.track_model(model)
            agent.start()
            time.sleep(0.05)  # the first tick (file, first walk of the model) is start-up
            count0 = agent._fine_count  # noqa: SLF001
            try:
                times[hz].append(decode(steps))
                records[hz] += agent._fine_count - count0  # noqa: SLF001
                if agent._last_tick_cost == agent._last_tick_cost:  # noqa: SLF001  (NaN before a tick)
                    costs[hz].append(agent._last_tick_cost)  # noqa: SLF001
            finally:
                agent.stop()
    off = statistics.median(times[0.0])
    where = "" if setup.cuda else f" (CPU, batch {batch}, {rounds} round: not a GPU figure)"
    parts = []
    for hz in rates:
        on = statistics.median(times[hz])
        tick = f"{statistics.median(costs[hz]) * 1e6:.0f} us" if costs[hz] else "n/a"
        parts.append(
            f"on ({hz:.0f} Hz asked, {records[hz] / sum(times[hz]):.1f} records/s, tick {tick}) "
            f"{on * 1e3:.1f} ms, ratio {on / off:.4f}"
        )
    return f"5. agent overhead on {steps} decode steps: off {off * 1e3:.1f} ms; " + "; ".join(parts) + where


# ------------------------------------------------------------------------------------ subprocesses
def frag_child(setup: Setup, mode: str) -> dict[str, Any]:
    """One long decode with a DynamicCache or a StaticCache (run in its own process, so the allocator
    starts empty): reserved − allocated every few steps (CUDA), and the cache's bytes."""
    import torch

    from collectors.agent import kv_bytes_by_device
    from collectors.torch_stats import derive

    batch, prompt, steps, every = setup.frag
    max_len = prompt + steps + 1
    model = build_model(setup)
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), device=setup.device)
    gaps: list[int] = []

    def gap() -> None:
        if setup.cuda:
            s = derive(torch.cuda.memory_stats())  # the agent's reading of the allocator's counters
            gaps.append(s["reserved"] - s["allocated"])

    def cache_bytes(c) -> int:
        return sum(kv_bytes_by_device(c).values())

    with torch.inference_mode():
        cache = static_cache(setup, model, batch, max_len) if mode == "static" else dynamic_cache()
        before = cache_bytes(cache)
        out = forward(model, ids, cache, 0)
        after_prefill = cache_bytes(cache)
        for i in range(steps):
            out = forward(model, next_tokens(out), cache, prompt + i)
            if i % every == 0:
                gap()
        synchronize(setup)
    result: dict[str, Any] = {
        "mode": mode,
        "tokens": prompt + steps,
        "max_cache_len": max_len if mode == "static" else None,
        "bytes_at_construction": before,
        "bytes_after_prefill": after_prefill,
        "bytes_final": cache_bytes(cache),
        "planned_final": predicted_kv(
            setup.config, setup.fmt, max_len if mode == "static" else prompt + steps, batch
        ),
        "max_gap": max(gaps) if gaps else None,
        "final_gap": None,
        "reserved": None,
        "segments": None,
        "retries": None,
    }
    if setup.cuda:
        s = derive(torch.cuda.memory_stats())
        result.update(
            final_gap=s["reserved"] - s["allocated"],
            reserved=s["reserved"],
            segments=s["segments"],
            retries=s["alloc_retries"],
        )
    return result


def second_child(device: str, nbytes: int) -> None:
    """The second process: allocate `nbytes` on the device, say so, hold it (the parent kills us)."""
    import torch

    x = torch.ones(nbytes, dtype=torch.uint8, device=device)  # ones: touched, so RSS shows it on the CPU
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"allocated {x.numel()}", flush=True)
    time.sleep(30)


def script_command(setup: Setup, *extra: str) -> list[str]:
    script = str(Path(__file__).resolve())
    return [sys.executable, script, "--device", setup.device, "--dtype", setup.fmt, *extra]


def check_fragmentation(setup: Setup) -> tuple[list[str], bool]:
    batch, prompt, steps, _ = setup.frag
    lines = [f"4. reserved − allocated over {steps} decode steps, batch {batch}, prompt {prompt}:"]
    ok = True
    cases = (
        ("dynamic", {}),
        ("static", {}),
        ("dynamic", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    )
    results = _fragmentation_children(setup, cases)
    for (mode, extra), (code, stdout, stderr) in zip(cases, results, strict=True):
        label = mode + (" + expandable_segments" if extra else "")
        if code != 0:
            lines.append(f"   {label:<32} failed: {stderr.strip().splitlines()[-3:]}")
            ok = False
            continue
        stats, cache, exact = _fragmentation_figures(setup, mode, json.loads(stdout.strip().splitlines()[-1]))
        ok = ok and exact
        lines.append(f"   {label:<32} {stats}")
        lines.append(f"   {'':<32} {cache}")
    return lines, ok


def _fragmentation_children(setup: Setup, cases: tuple) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each case's --frag-child run, the three at once: each has its own
    process, CUDA context and allocator (what is measured), and most of each one's time is importing torch and
    transformers (about 9 s of CPU each on a 2-core VM). Their output goes to files: a pipe one child fills
    while another is waited on would block it. A child still running after 240 s is stopped."""
    outputs = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in cases]
    children = [
        subprocess.Popen(
            script_command(setup, "--quick" if setup.quick else "--full", "--frag-child", mode),
            stdout=out,
            stderr=err,
            text=True,
            env=dict(os.environ, **extra),
        )
        for (mode, extra), (out, err) in zip(cases, outputs, strict=True)
    ]
    deadline = time.monotonic() + 240
    results = []
    for child, (out, err) in zip(children, outputs, strict=True):
        timed_out = False
        try:
            child.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            timed_out = True
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        if timed_out:  # not any SIGKILL: the OOM killer's (a Spark's answer to too much) is not a timeout
            stderr += "\nstill running after 240 s: stopped"
        out.close()
        err.close()
        results.append((child.returncode, stdout, stderr))
    return results


def _fragmentation_figures(setup: Setup, mode: str, r: dict) -> tuple[str, str, bool]:
    """(the allocator's figures, the cache's bytes against the planner's, whether they are exact) of one
    --frag-child result `r`."""
    if setup.cuda:
        stats = (
            f"max gap {gib(r['max_gap'])}, final gap {gib(r['final_gap'])}, "
            f"reserved {gib(r['reserved'])}, segments {r['segments']}, retries {r['retries']}"
        )
    else:
        stats = f"gaps {NA_CPU}"
    exact = r["bytes_final"] == r["planned_final"]
    if mode == "static":
        # allocated in full once: at construction (4.4x) or at the first update (5.x), never again
        once = r["bytes_after_prefill"] == r["bytes_final"] and r["bytes_at_construction"] in (
            0,
            r["bytes_final"],
        )
        exact = exact and once
        cache = (
            f"StaticCache({r['max_cache_len']} tokens) {r['bytes_at_construction']:,} B at construction, "
            f"{r['bytes_after_prefill']:,} B after prefill, {r['bytes_final']:,} B at the end; "
            f"planner {r['planned_final']:,} B: {verdict(exact)}"
        )
    else:
        cache = (
            f"DynamicCache {r['bytes_final']:,} B for {r['tokens']} tokens; "
            f"planner {r['planned_final']:,} B: {verdict(exact)}"
        )
    return stats, cache, exact


def check_second_process(setup: Setup, agent_dir: str) -> str:
    from collectors.agent_format import process_start_ticks, ring_file_name
    from collectors.agent_reader import AgentReader
    from tui.cmd_run import child_environment

    env = child_environment(dict(os.environ), agent_dir, 10.0)
    second = subprocess.Popen(
        script_command(setup, "--second-child", str(setup.second_bytes)),
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        said = second.stdout.readline().strip() if second.stdout is not None else ""
        if not said.startswith("allocated"):
            return f"6. second process (pid {second.pid}) failed before allocating (said {said!r})"
        time.sleep(1.0)  # a few agent ticks, and the driver's process list catches up
        used = nvml_used_by_pid(second.pid) if setup.cuda else None
        path = os.path.join(agent_dir, ring_file_name(second.pid, process_start_ticks(second.pid) or 0))
        if not os.path.exists(path):
            return f"6. second process (pid {second.pid}): no agent ring file at {path}"
        reader = AgentReader(path)
        try:
            seen = [r for r in reader.read_new().records if r.device == setup.agent_device]
        finally:
            reader.close()
        last = seen[-1] if seen else None
        nvml = f"NVML per-process {gib(used)}" if setup.cuda else f"NVML {NA_CPU}"
        return (
            f"6. second process (pid {second.pid}) allocating {setup.second_bytes / MiB:,.0f} MiB "
            f"on {setup.device}: {nvml}; its agent (device {setup.agent_device}, {len(seen)} records): "
            f"allocated {gib(last.allocated if last else None)}, "
            f"reserved {gib(last.reserved if last else None)}, rss {gib(last.rss if last else None)}, "
            f"cuda_state {last.cuda_state if last else 'no records'}"
        )
    finally:
        second.kill()
        second.wait()
        if second.stdout is not None:
            second.stdout.close()


def pool_now(gpu_pids: list[int]):
    """One decomposition of the pool (collectors/pool.py) as the monitor builds it."""
    from collectors.nvml_collector import NVMLCollector
    from collectors.os_collector import OSCollector
    from collectors.pool import PoolSampler, pool_parts

    collector = NVMLCollector(process_interval_s=0.0)
    try:
        nvml = collector.sample()
    finally:
        collector.close()
    unified = any(d.unified for d in nvml.devices)
    detail = PoolSampler(kernel_log=None).sample(gpu_pids)
    return pool_parts(OSCollector().sample(), nvml, detail, (), unified)


def check_pool(setup: Setup) -> str:
    """7: allocate setup.second_bytes here and see which part of the pool moves (see the module)."""
    from planner.engines.vllm.startup import DeviceMemory, admission, verdict_line
    from planner.engines.vllm.version import DEFAULT_VLLM_VERSION

    if not setup.cuda:
        parts = pool_now([os.getpid()])
        return f"7. where the pool is: host only on the CPU ({gib(parts.total)} MemTotal); GPU parts {NA_CPU}"
    import torch

    before = pool_now([os.getpid()])
    block = torch.ones(setup.second_bytes // 4, dtype=torch.float32, device="cuda")  # touched, not lazy
    torch.cuda.synchronize()
    time.sleep(1.0)
    after = pool_now([os.getpid()])
    cuda_free, cuda_total = torch.cuda.mem_get_info()
    integrated = bool(getattr(torch.cuda.get_device_properties(0), "is_integrated", False))
    del block

    def moved(name: str) -> str:
        a, b = getattr(before, name), getattr(after, name)
        return f"{name} {'n/a' if a is None or b is None else f'{(b - a) / GiB:+.2f}'}"

    names = ("free", "processes", "page_cache", "shmem", "kernel", "unitemized", "gpu_held")
    same = after.free is not None and abs(cuda_free - after.free) < 256 * MiB
    device = DeviceMemory(cuda_total, cuda_free, after.free, after.available, integrated,
                          torch.cuda.get_device_capability(0))  # fmt: skip
    verdict = admission(DEFAULT_VLLM_VERSION, "V1", 0.9, device)
    return (
        f"7. where the pool is ({'unified' if after.unified else 'host side'}, is_integrated {integrated}): "
        f"{setup.second_bytes / GiB:.2f} GiB allocated here moved {', '.join(moved(n) for n in names)} GiB; "
        f"cudaMemGetInfo free {gib(cuda_free)} of {gib(cuda_total)}, MemFree {gib(after.free)}, MemAvailable "
        f"{gib(after.available)} (CUDA free is MemFree: {'yes' if same else 'no'}); {verdict_line(verdict)}"
    )


# ------------------------------------------------------------------------------------ the check
def run_check(setup: Setup) -> int:
    import torch
    import transformers

    from collectors.agent import Agent
    from collectors.agent_reader import AgentReader

    t_start = time.time()
    pred = predicted(setup.config, setup.fmt)
    where = torch.cuda.get_device_name(0) if setup.cuda else "CPU (smoke run, tiny config)"
    print(
        f"memsight GPU check on {where}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{setup.fmt}"
    )
    print(cuda_context(setup))

    agent_dir = tempfile.mkdtemp(prefix="memsight-gpu-check-")
    ok = True
    try:
        # The measuring agent is ticked by hand (open(), no thread): a tick right after a step is the
        # measurement, and a second writer thread on the same ring would race the hand-made ticks.
        agent = Agent(hz=10, directory=agent_dir)
        agent.open()
        reader = AgentReader(agent.path)
        model = build_model(setup)
        lines, weights_ok = check_weights(setup, model, agent, reader, pred)
        print("\n".join(lines))
        lines, kv_ok = check_kv_growth(setup, model, agent, reader, pred)
        print("\n".join(lines))
        agent.stop()
        reader.close()
        print(check_overhead(setup, model, agent_dir))
        model = None  # free the weights before the subprocess checks
        if setup.cuda:
            torch.cuda.empty_cache()
        lines, frag_ok = check_fragmentation(setup)
        print("\n".join(lines))
        print(check_second_process(setup, agent_dir))
        print(check_pool(setup))
        ok = weights_ok and kv_ok and frag_ok
    finally:
        shutil.rmtree(agent_dir, ignore_errors=True)
    summary = "all equal" if ok else "MISMATCH (see above)"
    print(f"done in {time.time() - t_start:.0f} s; exact figures: {summary}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="memsight GPU check: predicted vs measured on one GPU")
    parser.add_argument("--quick", action="store_true", help="fewer cases (about a minute)")
    parser.add_argument("--full", dest="quick", action="store_false", help=argparse.SUPPRESS)
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: run every code path on the CPU with a tiny config (no GPU figures)",
    )
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bf16", help="weights and KV dtype (bf16)")
    parser.add_argument("--frag-child", choices=("dynamic", "static"), help=argparse.SUPPRESS)
    parser.add_argument("--second-child", type=int, metavar="BYTES", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == "cuda":
        try:
            import torch
        except ImportError:
            torch = None
        problem = cuda_problem(torch)
        if problem is not None:
            print(f"gpu_check: {problem}", file=sys.stderr)
            return 2
    setup = make_setup(args.device, args.dtype, args.quick)
    if args.second_child is not None:
        second_child(setup.device, args.second_child)
        return 0
    if args.frag_child is not None:
        print(json.dumps(frag_child(setup, args.frag_child)))
        return 0
    return run_check(setup)


if __name__ == "__main__":
    raise SystemExit(main())
