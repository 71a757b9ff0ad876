"""GPU check: planner predictions vs what the agent and NVML measure, on one NVIDIA GPU (< 5 minutes).

    python scripts/gpu_check.py [--quick]

Needs torch with CUDA and transformers; no network (the model is built from a config with random bf16
weights). It prints, each with its unit:
  1. CUDA context size: the driver's per-process usage (NVML) minus PyTorch's reserved, nothing allocated;
  2. weights: planner (planner.formats.weight_bytes) vs the agent's tracked parameter + buffer bytes;
  3. KV growth per token: planner (planner.kv.kv_bytes_per_token) vs the tracked DynamicCache's growth,
     at a few batch sizes and lengths;
  4. reserved − allocated over a long DynamicCache decode vs a StaticCache vs
     PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (each in its own subprocess);
  5. the agent's overhead on the decode loop (off vs on at 10 Hz, interleaved, medians);
  6. what NVML and the agent saw of a second process allocating 1 GiB.
Without CUDA it says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GiB, MiB = 2**30, 2**20

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


# ------------------------------------------------------------------------------------ pure helpers
def cuda_problem(torch_module) -> str | None:
    """Why this check cannot run (None if it can)."""
    if torch_module is None:
        return "torch is not installed"
    if not torch_module.cuda.is_available():
        return (
            f"no CUDA device: torch {torch_module.__version__} reports torch.cuda.is_available() == False "
            "(this check needs one NVIDIA GPU)"
        )
    return None


def predicted(config: dict) -> dict[str, int]:
    """The planner's weights (bf16) and KV bytes per token for the config."""
    from planner.formats import weight_bytes
    from planner.kv import kv_bytes_per_token
    from planner.spec import load_spec

    spec = load_spec(config)
    return {"weights": weight_bytes(spec, "bf16").total, "kv_per_token": kv_bytes_per_token(spec)}


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


def gib(n: float | None) -> str:
    return "unknown" if n is None else f"{n / GiB:.3f} GiB"


# ------------------------------------------------------------------------------------ GPU parts
def nvml_used_by_pid(pid: int) -> int | None:
    from collectors.nvml_collector import NVMLCollector, gpu_bytes_by_pid

    collector = NVMLCollector(process_interval_s=0.0)
    try:
        snap = collector.sample()
        return gpu_bytes_by_pid(snap).get(pid) if snap.available else None
    finally:
        collector.close()


FRAG_CHILD = r"""
import json, sys, torch, transformers
from transformers import LlamaConfig, LlamaForCausalLM, DynamicCache, StaticCache
cfg = LlamaConfig(**json.loads(sys.argv[1]))
torch.manual_seed(0)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
batch, steps, mode = 8, int(sys.argv[2]), sys.argv[3]
ids = torch.randint(0, cfg.vocab_size, (batch, 64), device="cuda")
gaps = []
with torch.inference_mode():
    if mode == "static":
        cache = StaticCache(config=cfg, max_batch_size=batch, max_cache_len=64 + steps + 1,
                            device="cuda", dtype=torch.bfloat16)
    else:
        cache = DynamicCache()
    pos = torch.arange(64, device="cuda")
    out = model(ids, past_key_values=cache, use_cache=True, cache_position=pos)
    for i in range(steps):
        nxt = out.logits[:, -1:].argmax(-1)
        out = model(nxt, past_key_values=cache, use_cache=True,
                    cache_position=torch.tensor([64 + i], device="cuda"))
        if i % 50 == 0:
            s = torch.cuda.memory_stats()
            gaps.append(s["reserved_bytes.all.current"] - s["allocated_bytes.all.current"])
s = torch.cuda.memory_stats()
print(json.dumps({"mode": mode, "max_gap": max(gaps), "final_gap": s["reserved_bytes.all.current"]
                  - s["allocated_bytes.all.current"], "reserved": s["reserved_bytes.all.current"],
                  "segments": s["segment.all.current"], "retries": s["num_alloc_retries"]}))
"""

SECOND_CHILD = r"""
import time, torch
x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("allocated", flush=True)
time.sleep(6)
"""


def run_check(quick: bool) -> int:
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    from collectors.agent import Agent
    from collectors.agent_reader import AgentReader

    pid = os.getpid()
    t_start = time.time()
    pred = predicted(LLAMA_CONFIG)
    print(f"memsight GPU check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")

    # 1. CUDA context
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    time.sleep(0.5)
    driver = nvml_used_by_pid(pid)
    reserved = torch.cuda.memory_reserved()
    context = None if driver is None else driver - reserved
    print(
        f"1. CUDA context (NVML per-process used − reserved, 1 tensor): {gib(context)} "
        f"(driver {gib(driver)}, reserved {gib(reserved)})"
    )

    agent_dir = tempfile.mkdtemp(prefix="memsight-gpu-check-")
    agent = Agent(hz=10, directory=agent_dir).start()
    cfg = LlamaConfig(**{k: v for k, v in LLAMA_CONFIG.items() if k not in ("model_type", "architectures")})
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    agent.track_model(model)
    time.sleep(0.3)
    agent.tick()
    reader = AgentReader(agent.path)
    rec = [r for r in reader.read_new().records if r.device == 0][-1]
    print(ratio_line("2. weights (bf16)", pred["weights"], rec.weights_bytes))

    # 3. KV growth per token with a DynamicCache
    print(f"3. KV bytes per token per sequence: predicted {pred['kv_per_token']:,} B")
    cases = ((1, 256, 64), (4, 1024, 64)) if quick else ((1, 256, 128), (4, 1024, 128), (8, 2048, 64))
    for batch, prompt, new in cases:
        cache = DynamicCache()
        agent.track_kv(cache)
        with torch.inference_mode():
            ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")
            out = model(ids, past_key_values=cache, use_cache=True)
            agent.tick()
            kv0 = [r for r in reader.read_new().records if r.device == 0][-1].kv_bytes
            for _ in range(new):
                out = model(out.logits[:, -1:].argmax(-1), past_key_values=cache, use_cache=True)
            torch.cuda.synchronize()
            agent.tick()
            kv1 = [r for r in reader.read_new().records if r.device == 0][-1].kv_bytes
        measured = per_token_growth(kv0, kv1, new, batch)
        print("   " + ratio_line(f"batch {batch}, prompt {prompt}, +{new}", pred["kv_per_token"], measured))
        agent.untrack(cache)
        del cache, out

    # 5. agent overhead on the decode loop
    def decode(n: int) -> float:
        cache = DynamicCache()
        with torch.inference_mode():
            out = model(torch.randint(0, cfg.vocab_size, (4, 128), device="cuda"), past_key_values=cache)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                out = model(out.logits[:, -1:].argmax(-1), past_key_values=cache)
            torch.cuda.synchronize()
            return time.perf_counter() - t0

    agent.stop()
    times: dict[str, list[float]] = {"off": [], "on": []}
    decode(16)
    for _ in range(3):
        times["off"].append(decode(128))
        on = Agent(hz=10, directory=agent_dir)
        on.track_model(model)
        on.start()
        times["on"].append(decode(128))
        on.stop()
    off, with_agent = statistics.median(times["off"]), statistics.median(times["on"])
    print(
        f"5. agent overhead on 128 decode steps: off {off * 1e3:.1f} ms, "
        f"on (10 Hz) {with_agent * 1e3:.1f} ms, "
        f"ratio {with_agent / off:.4f}"
    )
    model = None  # free the weights before the subprocess checks
    torch.cuda.empty_cache()

    # 4. reserved − allocated: DynamicCache vs StaticCache vs expandable segments (subprocesses)
    steps = "300" if quick else "1000"
    print(f"4. reserved − allocated over {steps} decode steps, batch 8:")
    for mode, extra in (
        ("dynamic", {}),
        ("static", {}),
        ("dynamic", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    ):
        env = dict(os.environ, **extra)
        proc = subprocess.run(
            [sys.executable, "-c", FRAG_CHILD, json.dumps(LLAMA_CONFIG), steps, mode],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
        )
        label = mode + (" + expandable_segments" if extra else "")
        if proc.returncode != 0:
            print(f"   {label:<32} failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"   {label:<32} max gap {gib(r['max_gap'])}, final gap {gib(r['final_gap'])}, "
            f"reserved {gib(r['reserved'])}, segments {r['segments']}, retries {r['retries']}"
        )

    # 6. a second process allocating 1 GiB, seen by NVML and by its own agent
    from tui.cmd_run import child_environment

    env = child_environment(dict(os.environ), agent_dir, 10.0)
    second = subprocess.Popen(
        [sys.executable, "-c", SECOND_CHILD], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        second.stdout.readline()
        time.sleep(1.0)
        used = nvml_used_by_pid(second.pid)
        from collectors.agent_format import process_start_ticks, ring_file_name

        path = os.path.join(agent_dir, ring_file_name(second.pid, process_start_ticks(second.pid) or 0))
        seen = [r for r in AgentReader(path).read_new().records if r.device == 0]
        last = seen[-1] if seen else None
        print(
            f"6. second process (pid {second.pid}) allocating 1 GiB: NVML per-process {gib(used)}; "
            f"its agent: allocated {gib(last.allocated if last else None)}, "
            f"reserved {gib(last.reserved if last else None)}, "
            f"cuda_state {last.cuda_state if last else 'no records'}"
        )
    finally:
        second.kill()
        second.wait()
    print(f"done in {time.time() - t_start:.0f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="memsight GPU check: predicted vs measured on one GPU")
    parser.add_argument("--quick", action="store_true", help="fewer cases (about a minute)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        torch = None
    problem = cuda_problem(torch)
    if problem is not None:
        print(f"gpu_check: {problem}", file=sys.stderr)
        return 2
    return run_check(args.quick)


if __name__ == "__main__":
    raise SystemExit(main())
