"""The experiment process of `memsight lab` (python -m collectors.lab.worker JOB.json).

JOB.json (written by tui/cmd_lab.py): {"experiment", "device", "cap_bytes", "model": {"config", "weights_dir",
"dtype"}, the experiment's parameters, "out": where the result JSON goes}. Progress lines go to stdout; the
result object to `out`. Exit status: 0 done, 3 no CUDA device, 1 anything else (with a message on stderr).

The agent (collectors.agent) is started by memsight's bootstrap (`memsight lab` runs this with the agent
injected, as `memsight run` does); every trial is a marked step, so `memsight replay` shows them. The
meter (collectors/lab/meter.py) gives allocated / peak / the cap on either device.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

NO_CUDA_EXIT = 3


def say(text: str) -> None:
    print(text, flush=True)


# ------------------------------------------------------------------------------------ agent
def _agent():
    import collectors.agent as agent  # noqa: PLC0415

    return agent


def mark(label: str) -> None:
    """A marked step, and a record of it in the agent's ring before the work goes on: a lab step (a decode
    token of a tiny model on the CPU) can be shorter than the agent's tick, and every step is a row."""
    agent = _agent()
    agent.mark_step(label)
    running = agent.current()
    if running is not None and not running.wait_recorded(timeout_s=2.0):
        say(f"  (the agent wrote no record of step {label!r} within 2 s)")


# ------------------------------------------------------------------------------------ model
def torch_dtype(name: str):
    import torch  # noqa: PLC0415

    return getattr(torch, name)


def build_model(job: dict, attn: str | None = None):
    """From a checkpoint folder (its real weights) or from a config (random weights of the same shapes
    and dtype), on the job's device, in eval mode."""
    import torch  # noqa: PLC0415
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: PLC0415

    spec = job["model"]
    dtype = torch_dtype(spec["dtype"])
    extra = {"attn_implementation": attn} if attn else {}
    torch.manual_seed(0)
    if spec.get("weights_dir"):
        model = AutoModelForCausalLM.from_pretrained(
            spec["weights_dir"], dtype=dtype, device_map=job["device"], local_files_only=True, **extra
        )
    else:
        config = dict(spec["config"])
        model_type = config.pop("model_type")
        for key in ("architectures", "torch_dtype", "dtype", "transformers_version"):
            config.pop(key, None)
        hf_config = AutoConfig.for_model(model_type, **config)
        with torch.device(job["device"]):
            model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype, **extra)
    return model.eval()


def cache_kwarg(model) -> str:
    import inspect  # noqa: PLC0415

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def keep_kwarg(model, keep: int) -> dict:
    """Only the last position's logits (keep=1) or every position's (keep=0), with the argument this
    transformers has."""
    import inspect  # noqa: PLC0415

    params = inspect.signature(model.forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return {name: keep}
    raise RuntimeError("this model's forward has no logits_to_keep / num_logits_to_keep argument")


def forward(model, ids, cache, position: int, keep: int = 1):
    import torch  # noqa: PLC0415

    positions = torch.arange(position, position + ids.shape[1], device=ids.device)
    return model(
        ids,
        use_cache=True,
        cache_position=positions,
        **{cache_kwarg(model): cache},
        **keep_kwarg(model, keep),
    )


def static_cache(model, batch: int, max_len: int, device: str, dtype):
    import inspect  # noqa: PLC0415

    from transformers import StaticCache  # noqa: PLC0415

    accepted = inspect.signature(StaticCache.__init__).parameters
    offered = {"max_batch_size": batch, "device": device, "dtype": dtype}
    return StaticCache(
        config=model.config, max_cache_len=max_len, **{k: v for k, v in offered.items() if k in accepted}
    )


# ------------------------------------------------------------------------------------ experiments
def _trial(meter, fn) -> dict:
    """Run fn() under the meter; an OOM is cleaned up (delete, collect, empty the cache) and reported."""
    meter.reset_peak()
    base = meter.allocated
    t0 = time.perf_counter()
    try:
        out = fn()
        ok, error, gap = True, None, None
    except Exception as exc:
        if not meter.is_oom(exc):
            raise
        out = {}
        reserved = meter.reserved()
        gap = None if reserved is None else reserved - meter.allocated  # reserved − allocated at failure
        ok, error = False, str(exc).splitlines()[0][:300]
    peak = meter.peak
    if not ok:
        # Out of the except block: the exception and its traceback (whose frames hold the failed trial's
        # tensors) are gone, so collecting and emptying the cache frees them before the next trial.
        meter.cleanup()
        leaked = meter.allocated - base
        if leaked > 0:
            say(f"  after cleaning up the failed trial, {leaked:,} B are still allocated")
    return {
        "ok": ok,
        "error": error,
        "peak": peak,
        "base": base,
        "gap_at_failure": gap,
        "seconds": time.perf_counter() - t0,
        **out,
    }


def edge(job: dict, model, meter) -> dict:
    import torch  # noqa: PLC0415
    from transformers import DynamicCache  # noqa: PLC0415

    ctx, steps, vocab = job["ctx"], job["decode_steps"], model.config.vocab_size

    def holds(batch: int, chunk: int | None) -> dict:
        label = f"edge batch {batch} ctx {ctx}" + (f" chunk {chunk}" if chunk else "")
        mark(label)

        def run() -> dict:
            cache = DynamicCache()  # tracked as KV by the agent's autotrack (collectors/autotrack.py)
            ids = torch.randint(0, vocab, (batch, ctx), device=job["device"])
            return _edge_pass(model, meter, ids, cache, label, chunk, steps)

        result = _trial(meter, run)
        result["batch"] = batch
        result["chunk"] = chunk
        say(
            f"  trial batch {batch:>5}{' chunk ' + str(chunk) if chunk else ''}: "
            f"{'holds' if result['ok'] else 'OUT OF MEMORY'}   peak {result['peak']:,} B"
        )
        return result

    found, trials = _edge_search(job, None, holds)
    out: dict[str, Any] = {"edge": found, "trials": trials}
    if job.get("prefill_chunk"):
        say(f"  again with chunked prefill ({job['prefill_chunk']} tokens per sequence per pass):")
        found_c, trials_c = _edge_search(job, job["prefill_chunk"], holds)
        out.update(edge_chunked=found_c, trials_chunked=trials_c)
    return out


def _edge_pass(model, meter, ids, cache, label: str, chunk: int | None, steps: int) -> dict:
    """One edge trial's work: the prompt `ids` prefilled into `cache` (in passes of `chunk` tokens), then
    `steps` decode steps; the prefill's peak and what is allocated with the cache filled."""
    import torch  # noqa: PLC0415

    ctx = ids.shape[1]
    step = chunk or ctx
    with torch.inference_mode():
        out = None
        for start in range(0, ctx, step):
            out = None  # the previous pass's logits must not stay alive through the next pass
            out = forward(model, ids[:, start : start + step], cache, start)
        prefill_peak = meter.peak
        mark(label + " decode")
        for i in range(steps):
            nxt = out.logits[:, -1:].argmax(-1)
            out = None
            out = forward(model, nxt, cache, ctx + i)
        kv = meter.allocated
    return {"prefill_peak": prefill_peak, "allocated_with_cache": kv}


def _edge_search(job: dict, chunk: int | None, holds) -> tuple[int, list[dict]]:
    """Largest batch in [lo, hi] that holds (lo - 1 if none): grow from the planner's guess until a
    failure or hi, then bisect. `holds(batch, chunk)` runs one trial."""
    lo, hi = job["lo"], job["hi"]
    trials: list[dict] = []
    known: dict[int, bool] = {}

    def ok(b: int) -> bool:
        if b not in known:
            trials.append(holds(b, chunk))
            known[b] = trials[-1]["ok"]
        return known[b]

    if not ok(lo):
        return lo - 1, trials
    good, bad = lo, None
    guess = job.get("guess_chunked" if chunk else "guess") or lo + 1
    probe = max(lo + 1, min(hi, guess))
    while bad is None and good < hi:
        if ok(probe):
            good = probe
            probe = min(hi, probe * 2)
        else:
            bad = probe
    if bad is None:
        return good, trials
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good, trials


def logits(job: dict, model, meter) -> dict:
    import torch  # noqa: PLC0415

    ctx, vocab = job["ctx"], model.config.vocab_size
    runs = {}
    for name, keep in (("last", 1), ("all", 0)):
        mark(f"logits {name} ctx {ctx}")

        def run(keep=keep) -> dict:
            with torch.inference_mode():
                ids = torch.randint(0, vocab, (1, ctx), device=job["device"])
                out = model(ids, use_cache=False, **keep_kwarg(model, keep))
                shape = list(out.logits.shape)
                nbytes = out.logits.nbytes
            return {"logits_shape": shape, "logits_bytes": int(nbytes)}

        runs[name] = _trial(meter, run)
        r = runs[name]
        say(
            f"  {name:>4} logits: {'done' if r['ok'] else 'OUT OF MEMORY'}   peak {r['peak']:,} B"
            + (f"   logits tensor {r['logits_shape']} = {r['logits_bytes']:,} B" if r["ok"] else "")
        )
    return {"runs": runs}


def eager(job: dict, model, meter) -> dict:
    import torch  # noqa: PLC0415

    vocab = model.config.vocab_size
    rows = []
    for n in job["lengths"]:
        row: dict[str, Any] = {"tokens": n}
        for impl in ("sdpa", "eager"):
            model.set_attn_implementation(impl)
            mark(f"prefill {n} tokens {impl}")

            def run(n: int = n) -> dict:
                with torch.inference_mode():
                    ids = torch.randint(0, vocab, (1, n), device=job["device"])
                    model(ids, use_cache=False, **keep_kwarg(model, 1))
                return {}

            row[impl] = _trial(meter, run)
            r = row[impl]
            say(f"  {n:>7} tokens {impl:>5}: {'done' if r['ok'] else 'OUT OF MEMORY'}   peak {r['peak']:,} B")
        rows.append(row)
    return {"rows": rows}


def fragment(job: dict, model, meter) -> dict:
    import torch  # noqa: PLC0415
    from transformers import DynamicCache  # noqa: PLC0415

    batch, prompt, tokens, every = job["batch"], job["prompt"], job["tokens"], job["every"]
    variant = job["variant"]
    label = job.get("label", variant)
    device = job["device"]
    dtype = torch_dtype(job["model"]["dtype"])
    series: list[dict] = []
    rss0, alloc0 = meter.rss(), meter.allocated

    def point(i: int) -> None:
        reserved = meter.reserved()
        allocated = meter.allocated
        rss = meter.rss()
        series.append(
            {
                "token": i,
                "allocated": allocated,
                "reserved": reserved,
                "gap": None if reserved is None else reserved - allocated,
                "rss": rss,
                # CPU: resident growth beyond live tensor growth (glibc's heap); not PyTorch's gap
                "rss_gap": None if rss is None or rss0 is None else (rss - rss0) - (allocated - alloc0),
            }
        )

    def run() -> dict:
        cache = (
            static_cache(model, batch, prompt + tokens + 1, device, dtype)
            if variant == "static"
            else DynamicCache()
        )
        with torch.inference_mode():
            ids = torch.randint(0, model.config.vocab_size, (batch, prompt), device=device)
            mark(f"{label} prefill")
            out = forward(model, ids, cache, 0)
            point(0)
            for i in range(1, tokens + 1):
                nxt = out.logits[:, -1:].argmax(-1)
                out = None  # the previous step's logits must not stay alive through the next step
                out = forward(model, nxt, cache, prompt + i - 1)
                if i % every == 0 or i == tokens:
                    mark(f"{label} token {i}")
                    point(i)
                    say(f"  {label} token {i:>6}: {series[-1]}")
        return {"cache_bytes": sum(t.nbytes for t in _cache_tensors(cache))}

    result = _trial(meter, run)
    result.update(variant=variant, series=series, alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    if device == "cuda":
        stats = torch.cuda.memory_stats()
        result.update(segments=stats.get("segment.all.current"), retries=stats.get("num_alloc_retries"))
    return result


def _cache_tensors(cache):
    import torch  # noqa: PLC0415

    from collectors.agent import kv_tensors  # noqa: PLC0415

    seen = set()
    for t in kv_tensors(cache, torch.Tensor):
        if id(t) not in seen:
            seen.add(id(t))
            yield t


def two(job: dict, model, meter) -> dict:
    """Load the model, claim a budget the way a serving engine does (allocated and touched), say so, hold."""
    import torch  # noqa: PLC0415

    mark(f"two: claim {job['claim_bytes']:,} B")
    try:
        claim = torch.ones(job["claim_bytes"], dtype=torch.uint8, device=job["device"])
    except Exception as exc:
        if not meter.is_oom(exc) and not isinstance(exc, MemoryError):
            raise
        say(f"claim failed: {str(exc).splitlines()[0][:200]}")
        return {"claimed": False, "error": str(exc).splitlines()[0][:300]}
    say(
        "ready",
    )
    mark("two: holding")
    time.sleep(job["hold_s"])
    del claim
    return {"claimed": True}


EXPERIMENTS = {"edge": edge, "logits": logits, "eager": eager, "fragment": fragment, "two": two}


def run(job: dict) -> dict:
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    from collectors.lab.meter import make_meter  # noqa: PLC0415

    if job["device"] == "cuda" and not torch.cuda.is_available():
        print(
            f"no CUDA device: torch {torch.__version__} reports torch.cuda.is_available() == False",
            file=sys.stderr,
        )
        raise SystemExit(NO_CUDA_EXIT)
    t0 = time.perf_counter()
    mark("load model")
    attn = "sdpa" if job["experiment"] == "eager" else None
    model = build_model(job, attn)  # tracked as weights by the agent's autotrack
    meter = make_meter(job["device"], job.get("cap_bytes"))
    meter.track_model(model)
    weights = meter.allocated
    say(
        f"  model loaded on {job['device']}: {weights:,} B allocated; cap: {meter.describe_cap()} "
        f"(torch {torch.__version__}, transformers {transformers.__version__})"
    )
    with meter:
        result = EXPERIMENTS[job["experiment"]](job, model, meter)
    mark("done")
    return {
        "experiment": job["experiment"],
        "device": job["device"],
        "pid": os.getpid(),
        "cap_bytes": job.get("cap_bytes"),
        "cap": meter.describe_cap(),
        "allocated_after_load": weights,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "seconds": time.perf_counter() - t0,
        **result,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0], encoding="utf-8") as f:
        job = json.load(f)
    result = run(job)
    tmp = job["out"] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, job["out"])
    gc.collect()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
