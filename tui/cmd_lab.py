"""`memsight lab EXPERIMENT`: predict, then measure. The lesson's edge search and its "Break It" experiments.

    memsight lab edge     --model M --ctx N [--lo A --hi B] [--prefill-chunk C]
    memsight lab logits   --model M --ctx N
    memsight lab eager    --model M --lengths N1,N2,N3
    memsight lab fragment --model M [--batch B --prompt P --tokens T --every K]
    memsight lab two      --model M [--claim-gib X]
each with --device cuda|cpu, --cap-gib X, --record FILE, --json, --force.

Every experiment prints the planner's prediction first (planner.budget / planner.activations / planner.kv,
with the arithmetic), then runs the workload (collectors/lab/worker.py) in child processes with memsight's
agent injected and a Monitor recording (as `memsight run --headless --record`), then prints measured against
predicted, the difference and its likely cause. This process never imports torch: the children do.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collectors.errors import CollectorError
from planner.units import GiB

if TYPE_CHECKING:
    from collectors.monitor import Monitor

EXPERIMENTS = ("edge", "logits", "eager", "fragment", "two")
NO_CUDA_EXIT = 3  # collectors/lab/worker.py's exit status when torch sees no CUDA device
HELP = {
    "edge": "binary-search the largest batch that holds a prefill of --ctx tokens plus a few decode steps",
    "logits": "every position's logits vs only the last one's: the tensor nobody needed",
    "eager": "eager attention's N x N score matrices vs SDPA, at growing lengths",
    "fragment": "reserved − allocated over a token-by-token decode: DynamicCache, StaticCache, "
    "expandable_segments",
    "two": "two model-loading processes, each claiming its budget: does the second fit?",
}


# ------------------------------------------------------------------------------------ arguments
def _size(what: str):
    """A size, GiB unless written ('0.5', '512MiB', '24GB'): bytes, through tui/options.py's parser."""
    from tui.options import argparse_type, parse_size  # noqa: PLC0415

    return argparse_type(parse_size, what, strict=True)


def _count(what: str):
    """A whole positive count ('8192', '8,192', '32k'), through the shared parser (tui/options.py)."""
    from tui.options import argparse_type, parse_count  # noqa: PLC0415

    return argparse_type(parse_count, what, minimum=1)


def _lengths_arg(text: str) -> list[int]:
    from tui.options import InputError, parse_count  # noqa: PLC0415

    try:
        values = [parse_count(x, "--lengths", minimum=1) for x in text.split(",") if x.strip()]
    except InputError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (lengths are written like 4096,8192,16k)") from None
    if not values:
        raise argparse.ArgumentTypeError(f"--lengths: expected lengths like 4096,8192,16k, got {text!r}")
    return sorted(set(values))


def _vllm_utilization() -> float:
    """The share of the device a vLLM started today claims by default (the newest version read)."""
    from planner.engines.vllm.version import (  # noqa: PLC0415
        DEFAULT_VLLM_VERSION,
        default_gpu_memory_utilization,
        parse_version,
    )

    return default_gpu_memory_utilization(parse_version(DEFAULT_VLLM_VERSION))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        help="catalog name, config.json, checkpoint folder, or HF repo id in the local cache "
        "(a config alone: random weights of the right shapes and dtype)",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cuda (default) or cpu")
    p.add_argument(
        "--cap-gib",
        dest="cap_bytes",
        type=_size("--cap-gib"),
        metavar="X",
        help="what the experiment may use, GiB (GPU: set_per_process_memory_fraction; CPU: a checked "
        "budget on live tensor bytes); the prediction uses it as the capacity",
    )
    p.add_argument(
        "--record", metavar="FILE", help="recording (default ./memsight-lab-EXPERIMENT-<pid>.jsonl)"
    )
    p.add_argument(
        "--json", action="store_true", help="print the result object as JSON (the text goes to stderr)"
    )
    p.add_argument("--force", action="store_true", help="run even when the prediction says it cannot fit")
    p.add_argument("--hz", type=float, default=2.0, help="monitor sampling rate (default 2 Hz)")
    p.add_argument("--agent-hz", type=float, default=10.0, help="in-process agent rate (default 10 Hz)")


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    sub = _experiment_subparsers(parser)
    for experiment in EXPERIMENTS:
        p = sub.add_parser(experiment, help=HELP[experiment], description=HELP[experiment])
        _common(p)
        _EXPERIMENT_ARGUMENTS[experiment](p)


def _experiment_subparsers(parser: argparse.ArgumentParser):
    """The EXPERIMENT subcommands, whose parsers' errors are one `memsight lab EXPERIMENT: ...` line."""
    from tui.cli import one_line_error  # noqa: PLC0415

    sub = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    add_parser = sub.add_parser

    def experiment_parser(experiment: str, **kwargs: Any) -> argparse.ArgumentParser:
        """An experiment's parser, whose errors are one `memsight lab EXPERIMENT: ...` line, as every
        other memsight error."""
        p = add_parser(experiment, **kwargs)
        p.error = one_line_error(f"lab {experiment}")  # type: ignore[method-assign]
        return p

    sub.add_parser = experiment_parser  # type: ignore[method-assign]
    return sub


def _edge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ctx",
        "--context",
        dest="ctx",
        type=_count("--ctx"),
        required=True,
        help="prompt tokens per sequence",
    )
    p.add_argument("--lo", type=_count("--lo"), default=1, help="smallest batch to try (default 1)")
    p.add_argument("--hi", type=_count("--hi"), default=4096, help="largest batch to try (default 4096)")
    p.add_argument(
        "--decode-steps", type=_count("--decode-steps"), default=8, help="decode steps after the prefill (8)"
    )
    p.add_argument(
        "--prefill-chunk",
        type=_count("--prefill-chunk"),
        help="also search with the prompt pushed in chunks of C",
    )


def _logits_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ctx",
        "--context",
        dest="ctx",
        type=_count("--ctx"),
        default=32768,
        help="prompt tokens (default 32768)",
    )


def _eager_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lengths", type=_lengths_arg, default=[4096, 8192, 16384], help="prefill lengths (4096,8192,16384)"
    )


def _fragment_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=_count("--batch"), default=8, help="sequences (default 8)")
    p.add_argument("--prompt", type=_count("--prompt"), default=64, help="prompt tokens (default 64)")
    p.add_argument(
        "--tokens", type=_count("--tokens"), default=4000, help="tokens generated one at a time (4000)"
    )
    p.add_argument("--every", type=_count("--every"), default=250, help="snap every K tokens (default 250)")


def _two_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--claim-gib",
        dest="claim_bytes",
        type=_size("--claim-gib"),
        metavar="X",
        help="what each process claims on top of its weights (GPU default: the newest vLLM's default "
        "gpu_memory_utilization of the device, 0.92, minus the weights; required on the CPU)",
    )
    p.add_argument("--hold", type=float, default=4.0, help="seconds each process holds its claim (4)")
    p.add_argument(
        "--new-process-gib",
        dest="new_process_bytes",
        type=_size("--new-process-gib"),
        default=GiB,
        metavar="X",
        help="alert when a new process holds more than X GiB (memsight's default 1)",
    )
    p.add_argument(
        "--growth-gib",
        dest="growth_bytes",
        type=_size("--growth-gib"),
        default=2 * GiB,
        metavar="X",
        help="alert when a process grows more than X GiB in 30 s (memsight's default 2)",
    )


# each experiment's own options, after the common ones (_common)
_EXPERIMENT_ARGUMENTS = {
    "edge": _edge_arguments,
    "logits": _logits_arguments,
    "eager": _eager_arguments,
    "fragment": _fragment_arguments,
    "two": _two_arguments,
}


# ------------------------------------------------------------------------------------ the model
@dataclass(frozen=True, slots=True)
class LabModel:
    spec: Any  # planner.ModelSpec
    dtype: str  # torch dtype name the child builds in
    weights_dir: str | None  # a folder with real weights, or None: random weights from the config
    source: str  # what the user gave


def resolve_model(text: str) -> LabModel:
    from planner.spec import find_in_hf_cache, load_spec  # noqa: PLC0415
    from planner.units import canonical_dtype  # noqa: PLC0415

    spec = load_spec(text)
    weights_dir = None
    path = pathlib.Path(text).expanduser()
    folder = path if path.is_dir() else None
    if folder is None and "/" in text and not path.exists():
        cached = find_in_hf_cache(text)
        folder = cached.parent if cached is not None else None
    if folder is not None and (any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))):
        weights_dir = str(folder)
    try:
        dtype = canonical_dtype(spec.torch_dtype)
    except ValueError:
        dtype = "bfloat16"
    if dtype not in ("bfloat16", "float16", "float32"):
        dtype = "bfloat16"
    return LabModel(spec=spec, dtype=dtype, weights_dir=weights_dir, source=text)


def dtype_bytes_of(model: LabModel) -> int:
    from planner.units import dtype_bytes  # noqa: PLC0415

    return dtype_bytes(model.dtype)


# ------------------------------------------------------------------------------------ output
class Out:
    """Human text to stdout, or to stderr when --json owns stdout."""

    def __init__(self, json_mode: bool) -> None:
        self.stream = sys.stderr if json_mode else sys.stdout

    def __call__(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)


def gib(n: int | float | None) -> str:
    return "unknown" if n is None else f"{n / GiB:.4f} GiB"


def b(n: int | float | None) -> str:
    return "unknown" if n is None else f"{int(n):,} B"


def diff_text(measured: float | None, predicted: float) -> str:
    if measured is None:
        return "not measured"
    d = measured - predicted
    pct = f" ({100 * d / predicted:+.1f}%)" if predicted else ""
    return f"{d:+,.0f} B{pct}"


# ------------------------------------------------------------------------------------ children
@dataclass
class Lab:
    """One lab run: the monitor recording it, the children it started, what they printed."""

    args: argparse.Namespace
    model: LabModel
    out: Out
    record: str
    agent_dir: str
    workdir: str
    monitor: Any = None
    children: list[subprocess.Popen] = field(default_factory=list)
    alerts: list[Any] = field(default_factory=list)
    _alert_keys: set = field(default_factory=set)
    max_rss: dict[int, int] = field(default_factory=dict)  # child pid -> largest RSS the monitor saw

    def job(self, experiment: str, **params: Any) -> dict:
        m = self.model
        return {
            "experiment": experiment,
            "device": self.args.device,
            "cap_bytes": self.args.cap_bytes,
            "model": {"config": dict(m.spec.config), "weights_dir": m.weights_dir, "dtype": m.dtype},
            **params,
        }

    def start_child(self, job: dict, tag: str, extra_env: dict[str, str] | None = None):
        from tui.cmd_run import child_environment  # noqa: PLC0415

        n = len(self.children)
        job = dict(job, out=os.path.join(self.workdir, f"result-{n}.json"))
        job_path = os.path.join(self.workdir, f"job-{n}.json")
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump(job, f)
        env = child_environment(dict(os.environ), self.agent_dir, self.args.agent_hz)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra_env or {})
        log_path = os.path.join(self.workdir, f"child-{n}.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "collectors.lab.worker", job_path],
                env=env,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches memsight, which stops the children itself
            )
        self.children.append(proc)
        ready = threading.Event()

        def relay() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip()
                if line == "ready":
                    ready.set()
                self.out(f"  [{tag} pid {proc.pid}] {line.strip()}")
            ready.set()

        thread = threading.Thread(target=relay, daemon=True)
        thread.start()
        return proc, job["out"], log_path, ready, thread

    def poll_alerts(self) -> None:
        state = self.monitor.state()
        pids = {p.pid for p in self.children}
        for proc in state.os.processes if state.os is not None else ():
            if proc.pid in pids:
                self.max_rss[proc.pid] = max(self.max_rss.get(proc.pid, 0), proc.rss)
        for alert in state.alerts:
            key = (alert.kind, alert.pid, alert.device, alert.severity)
            if key not in self._alert_keys:
                self._alert_keys.add(key)
                self.alerts.append(alert)

    def wait(self, proc: subprocess.Popen, thread: threading.Thread) -> int:
        while proc.poll() is None:
            self.poll_alerts()
            time.sleep(0.2)
        thread.join(timeout=5)
        self.poll_alerts()
        return proc.returncode

    def run_child(self, job: dict, tag: str, extra_env: dict[str, str] | None = None) -> dict:
        proc, out_path, log_path, _ready, thread = self.start_child(job, tag, extra_env)
        code = self.wait(proc, thread)
        return self.result(code, out_path, log_path, tag)

    def result(self, code: int, out_path: str, log_path: str, tag: str) -> dict:
        if code == NO_CUDA_EXIT:
            raise NoCuda(_tail(log_path, 1))
        if code != 0 or not os.path.exists(out_path):
            raise CollectorError(f"the {tag} workload failed (exit {code}): {_tail(log_path, 3)}")
        with open(out_path, encoding="utf-8") as f:
            return json.load(f)

    def stop_children(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 5
        for proc in self.children:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class NoCuda(Exception):
    pass


def _tail(path: str, n: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return "(no log)"
    return " | ".join(lines[-n:]) or "(no output)"


# ------------------------------------------------------------------------------------ predictions
def nvml_first_device():
    """GPU 0 as NVML sees it (a DeviceInfo), or None where NVML has no device to give."""
    from collectors.nvml_collector import NVMLCollector  # noqa: PLC0415

    collector = NVMLCollector()
    try:
        snap = collector.sample()
    finally:
        collector.close()
    return snap.devices[0] if snap.available and snap.devices else None


def capacity_bytes(args: argparse.Namespace, lab_model: LabModel) -> tuple[int, str]:
    """The capacity the prediction uses: the cap, else the device's total (NVML) or this machine's RAM."""
    if args.cap_bytes is not None:
        return args.cap_bytes, "--cap-gib"
    if args.device == "cuda":
        dev = nvml_first_device()
        if dev is not None and dev.total:
            return dev.total, f"GPU 0 total ({dev.name}, NVML)"
        raise CollectorError("no capacity for the prediction: NVML gives no GPU total; give --cap-gib X")
    from planner.machines import this_machine  # noqa: PLC0415

    machine = this_machine()
    return machine.capacity_bytes, f"this machine's memory ({machine.label})"


def plan(lab_model: LabModel, capacity: int, **inputs: Any):
    from planner.budget import PlanInputs, make_plan  # noqa: PLC0415

    fields = dict(
        model=lab_model.source,
        machine="custom",
        capacity_bytes=capacity,
        os_reserve_bytes=0,
        overhead_bytes=0,
        block_size=1,
    )
    fields.update(inputs)
    return make_plan(PlanInputs(**fields), spec=lab_model.spec)


def largest_users(fits, limit: int = 1 << 20) -> int:
    """Largest u >= 0 with fits(u) (fits monotone decreasing)."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def too_large(out: Out, args: argparse.Namespace, what: str) -> int | None:
    """The prediction says even the smallest run cannot fit: stop before loading, unless --force."""
    out(f"  PREDICTION: {what}")
    if args.force:
        out("  --force: running it anyway")
        return None
    print(
        f"memsight: {what}; not started (nothing was loaded). --force runs it anyway, or raise --cap-gib",
        file=sys.stderr,
    )
    return 2


# ------------------------------------------------------------------------------------ edge
def predict_edge(lab_model: LabModel, args, cap: int, out: Out) -> dict | int:
    from planner.kv import kv_bytes_for_sequence  # noqa: PLC0415

    spec, ctx, steps = lab_model.spec, args.ctx, args.decode_steps
    one = plan(lab_model, cap, context=ctx, output_tokens=steps, users=1, prefill_chunk=ctx)
    kv_seq = kv_bytes_for_sequence(spec, ctx + steps)
    act = one.activation
    out(
        f"  weights             {b(one.weight_bytes):>20}   "
        f"({one.weights.format}, {one.params.total:,} parameters)"
    )
    out(
        f"  KV per sequence     {b(kv_seq):>20}   ({one.kv_bytes_per_token:,} B/token x ({ctx} prompt + "
        f"{steps} decoded) tokens)"
    )
    out(
        f"  activation peak     {b(act.peak_bytes):>20}   ({act.phase}: {ctx}-token chunk x "
        f"{act.per_token_layer_bytes:,} B/token = (4h + 3I) x {act.dtype_bytes} B, "
        f"+ logits {act.logits_bytes:,} B)"
    )
    free = cap - one.weight_bytes - act.peak_bytes
    out(
        f"  users that fit    = (capacity {cap:,} − weights − activations) / KV per sequence = "
        f"{free:,} / {kv_seq:,} -> planner max users {one.max_users}"
    )

    def batched(chunk_of: int):
        return lambda u: (
            plan(lab_model, cap, context=ctx, output_tokens=steps, users=u, prefill_chunk=u * chunk_of).fits
        )

    whole = largest_users(batched(ctx))
    out(
        f"  this experiment prefills the whole batch in one pass (u x {ctx} tokens at once, the planner's "
        f"prefill chunk = u x ctx): largest batch {whole}"
    )
    chunked = None
    if args.prefill_chunk:
        chunked = largest_users(batched(min(args.prefill_chunk, ctx)))
        out(
            f"  with --prefill-chunk {args.prefill_chunk} (u x {args.prefill_chunk} tokens a pass): {chunked}"
        )
    if whole < 1:
        code = too_large(out, args, f"batch 1 at {ctx} tokens does not fit in {gib(cap)}")
        if code is not None:
            return code
    return {
        "capacity_bytes": cap,
        "weight_bytes": one.weight_bytes,
        "kv_bytes_per_sequence": kv_seq,
        "activation_bytes": act.peak_bytes,
        "planner_max_users": one.max_users,
        "predicted_edge": whole,
        "predicted_edge_chunked": chunked,
    }


def run_edge(lab: Lab, pred: dict) -> dict:
    a = lab.args
    return lab.run_child(
        lab.job(
            "edge",
            ctx=a.ctx,
            lo=a.lo,
            hi=a.hi,
            decode_steps=a.decode_steps,
            prefill_chunk=a.prefill_chunk,
            guess=max(a.lo, pred["predicted_edge"]),
            guess_chunked=max(a.lo, pred["predicted_edge_chunked"] or 0),
        ),
        "edge",
    )


def compare_edge(lab: Lab, pred: dict, m: dict, out: Out) -> dict:
    a = lab.args
    found = m["edge"]
    capped = found >= a.hi  # the search stopped at its ceiling: the edge is at least there, not found
    measured = f"at least {found} (the search stopped at --hi {a.hi})" if capped else str(found)
    difference = "" if capped else f"   difference {found - pred['predicted_edge']:+d}"
    out(
        f"  edge (largest batch that held)   measured {measured}   predicted {pred['predicted_edge']}"
        f"{difference}   (planner max users, one {a.ctx}-token chunk: {pred['planner_max_users']})"
    )
    good = [t for t in m["trials"] if t["ok"] and t["batch"] == found]
    bad = sorted((t for t in m["trials"] if not t["ok"]), key=lambda t: t["batch"])
    spike = _edge_spike(lab, pred, good[0], out) if good else None
    if bad:
        _edge_first_failure(bad[0], out)
    cause_chunked = None
    if m.get("edge_chunked") is not None:
        cause_chunked = _edge_chunked(lab, pred, m, out)
    _os_headroom(lab, out)
    cause = edge_cause(found, pred["predicted_edge"], a.hi, chunked=False)
    if cause_chunked is None:
        out(f"  likely cause: {cause}")
    else:  # each verdict names its search: "as predicted" of one is not said of the other
        out(f"  likely cause, the whole batch in one prefill: {cause}")
        out(f"  likely cause, chunked prefill ({a.prefill_chunk} tokens/pass): {cause_chunked}")
    return {
        "edge": found,
        "predicted_edge": pred["predicted_edge"],
        "capped": capped,
        "planner_max_users": pred["planner_max_users"],
        "prefill_spike_bytes": spike,
        "trials": m["trials"],
        "trials_chunked": m.get("trials_chunked"),
        "edge_chunked": m.get("edge_chunked"),
        "predicted_edge_chunked": pred["predicted_edge_chunked"],
        "cause": cause,
        "cause_chunked": cause_chunked,
    }


def _edge_spike(lab: Lab, pred: dict, t: dict, out: Out) -> int:
    """The edge's own trial `t`: its prefill spike (peak − weights − KV) and what stayed allocated after
    decoding, each against the planner; the spike."""
    from planner.activations import logits_bytes  # noqa: PLC0415
    from planner.kv import kv_bytes_for_sequence  # noqa: PLC0415

    a, spec, found = lab.args, lab.model.spec, t["batch"]
    kv_prefill = found * kv_bytes_for_sequence(spec, a.ctx)
    spike = t["prefill_peak"] - t["base"] - kv_prefill
    predicted_spike = plan(
        lab.model, pred["capacity_bytes"], context=a.ctx, users=found, prefill_chunk=found * a.ctx
    ).activation.peak_bytes
    out(
        f"  prefill spike at batch {found}: peak {b(t['prefill_peak'])} − weights {b(t['base'])} − "
        f"KV {b(kv_prefill)} = {b(spike)}; planner ({found} x {a.ctx} tokens) {b(predicted_spike)}, "
        f"difference {diff_text(spike, predicted_spike)}"
    )
    kept = t["allocated_with_cache"] - t["base"]
    predicted_kept = found * pred["kv_bytes_per_sequence"] + logits_bytes(
        spec, found, dtype_bytes_of(lab.model)
    )
    out(
        f"  kept after decoding: {b(kept)} vs planner KV + the last step's logits {b(predicted_kept)} "
        f"({diff_text(kept, predicted_kept)}; the rest: the prompt ids and small buffers)"
    )
    return spike


def _edge_first_failure(f: dict, out: Out) -> None:
    """The smallest batch that failed: its error, and reserved − allocated at that moment."""
    gap = "n/a on the CPU (no caching allocator)" if f["gap_at_failure"] is None else gib(f["gap_at_failure"])
    out(f"  first failure: batch {f['batch']}: {f['error']}")
    out(f"  reserved − allocated at that failure (fragmentation): {gap}")


def _edge_chunked(lab: Lab, pred: dict, m: dict, out: Out) -> str:
    """The search again with chunked prefill: measured against predicted; its likely cause."""
    a = lab.args
    found_c, predicted_c = m["edge_chunked"], pred["predicted_edge_chunked"]
    capped_c = found_c >= a.hi
    out(
        f"  edge with chunked prefill ({a.prefill_chunk} tokens/pass): measured "
        + (f"at least {found_c} (the search stopped at --hi {a.hi})" if capped_c else str(found_c))
        + f"   predicted {predicted_c}"
        + ("" if capped_c else f"   difference {found_c - predicted_c:+d}")
    )
    logit_bytes = dtype_bytes_of(lab.model)
    return edge_cause(found_c, predicted_c, a.hi, chunked=True, logit_bytes=logit_bytes)


def _os_headroom(lab: Lab, out: Out) -> None:
    """The OS's MemAvailable now, where the monitor reads it."""
    state = lab.monitor.state()
    if state.os is not None:
        where = "unified memory: this is the real headroom" if state.unified else "not unified memory"
        out(f"  OS: MemAvailable {gib(state.os.mem_available)} of {gib(state.os.mem_total)} ({where})")


def edge_cause(found: int, predicted: int, hi: int, *, chunked: bool, logit_bytes: int = 2) -> str:
    """The likely cause of an edge's difference from its prediction, in words (`logit_bytes`: bytes per
    logit, the model's dtype's)."""
    if found >= hi:
        return (
            f"the search stopped at its ceiling (--hi {hi}): the edge is at least {hi}, not found; "
            "raise --hi to find it"
        )
    if found < predicted and chunked:
        return (
            "below the prediction: each pass ends with the last position's logits of every sequence "
            f"(batch x vocab x {logit_bytes} B; the planner counts one row per prefill chunk), and each "
            "chunk grows the DynamicCache with torch.cat, which holds a layer's old and new keys/values at "
            "once (the lesson's brief double copy)"
        )
    if found < predicted:
        return (
            "below the prediction: fragmentation (reserved well above allocated at the failure), the prefill "
            "spike of B x L tokens (try --prefill-chunk), or memory outside the planner's buckets"
        )
    if found > predicted:
        return (
            "above the prediction: the planner's activation peak is an upper estimate here (temporaries of "
            "(4h + 3I) per token are not all alive at once), or something quantizes the cache"
        )
    return "as predicted"


# ------------------------------------------------------------------------------------ logits
def predict_logits(lab_model: LabModel, args, cap: int, out: Out) -> dict | int:
    from planner.activations import logits_bytes  # noqa: PLC0415

    spec, ctx, nb = lab_model.spec, args.ctx, dtype_bytes_of(lab_model)
    every = logits_bytes(spec, ctx, nb)
    last = logits_bytes(spec, 1, nb)
    out(
        f"  every position: ctx x vocab x bytes = {ctx:,} x {spec.vocab_size:,} x {nb} = "
        f"{b(every)} ({gib(every)})"
    )
    out(f"  last position only (logits_to_keep=1): 1 x {spec.vocab_size:,} x {nb} = {b(last)}")
    out(f"  predicted difference between the two peaks: {b(every - last)}")
    plans = {
        mode: plan(lab_model, cap, context=ctx, users=1, prefill_chunk=ctx, logits=mode)
        for mode in ("last", "all")
    }
    for mode, p in plans.items():
        out(
            f"  {mode:>4}: weights {b(p.weight_bytes)} + activation peak {b(p.activation_bytes)} "
            f"-> {'fits' if p.weight_bytes + p.activation_bytes <= cap else 'DOES NOT FIT'} in {gib(cap)}"
        )
    if plans["last"].weight_bytes + plans["last"].activation_bytes > cap:
        code = too_large(
            out, args, f"a {ctx}-token forward pass does not fit in {gib(cap)} even with one logit"
        )
        if code is not None:
            return code
    return {
        "all_logits_bytes": every,
        "last_logits_bytes": last,
        "predicted_difference": every - last,
        "activation_bytes": {mode: p.activation_bytes for mode, p in plans.items()},
    }


def run_logits(lab: Lab, pred: dict) -> dict:
    return lab.run_child(lab.job("logits", ctx=lab.args.ctx), "logits")


def compare_logits(lab: Lab, pred: dict, m: dict, out: Out) -> dict:
    runs = m["runs"]
    for mode in ("last", "all"):
        r = runs[mode]
        act = None if not r["ok"] else r["peak"] - r["base"]
        out(
            f"  {mode:>4}: {'held' if r['ok'] else 'OUT OF MEMORY: ' + str(r['error'])}; peak − weights "
            f"{b(act)} vs planner activation peak {b(pred['activation_bytes'][mode])} "
            f"({diff_text(act, pred['activation_bytes'][mode])})"
        )
    measured = None
    if runs["all"]["ok"] and runs["last"]["ok"]:
        measured = runs["all"]["peak"] - runs["last"]["peak"]
        tensor = runs["all"]["logits_bytes"]
        out(
            f"  all-logits peak − last-logit peak: measured {b(measured)}   "
            f"predicted {b(pred['predicted_difference'])}"
            f"   difference {diff_text(measured, pred['predicted_difference'])}"
        )
        out(f"  the all-logits tensor itself: {b(tensor)} (predicted {b(pred['all_logits_bytes'])})")
        cause = (
            "the last-logit run's peak is set inside a layer (its MLP temporaries), not at the head, so the "
            "all-logits tensor lands on a lower base than that peak"
            if measured < pred["predicted_difference"]
            else "the head's input/output copies alive with the logits"
            if measured > pred["predicted_difference"]
            else "exact"
        )
        out(f"  likely cause of the difference: {cause}")
    else:
        cause = "the all-logits run ran out of memory under the cap: one tensor nobody needed"
        out(f"  {cause}")
    return {"runs": runs, "measured_difference": measured, **pred, "cause": cause}


# ------------------------------------------------------------------------------------ eager
def predict_eager(lab_model: LabModel, args, cap: int, out: Out) -> dict | int:
    from planner.activations import eager_attention_bytes  # noqa: PLC0415

    spec, nb = lab_model.spec, dtype_bytes_of(lab_model)
    rows = []
    out(
        f"  score matrix per layer = heads x N² x ({nb} B scores + 4 B fp32 softmax copy), "
        f"{spec.num_attention_heads} heads"
    )
    first_fail = None
    for n in args.lengths:
        p = {
            m: plan(lab_model, cap, context=n, users=1, prefill_chunk=n, attention=m)
            for m in ("eager", "fused")
        }
        scores = eager_attention_bytes(spec, n, dtype_bytes=nb)
        fits = {m: p[m].weight_bytes + p[m].activation_bytes <= cap for m in p}
        out(
            f"  N={n:>7}: scores {b(scores):>18}   activation peak eager {b(p['eager'].activation_bytes)} / "
            f"sdpa {b(p['fused'].activation_bytes)}   "
            f"fits (no cache kept): eager {fits['eager']}, sdpa {fits['fused']}"
        )
        if first_fail is None and not fits["eager"] and fits["fused"]:
            first_fail = n
        rows.append(
            {
                "tokens": n,
                "scores_bytes": scores,
                "eager_activation_bytes": p["eager"].activation_bytes,
                "sdpa_activation_bytes": p["fused"].activation_bytes,
                "eager_fits": fits["eager"],
                "sdpa_fits": fits["fused"],
            }
        )
    out(
        f"  predicted: eager fails where sdpa holds first at N = "
        f"{first_fail if first_fail else 'none of these'}"
    )
    if not rows[0]["sdpa_fits"]:
        code = too_large(
            out, args, f"a {args.lengths[0]}-token prefill does not fit in {gib(cap)} even with sdpa"
        )
        if code is not None:
            return code
    return {"rows": rows, "predicted_first_failure": first_fail}


def run_eager(lab: Lab, pred: dict) -> dict:
    return lab.run_child(lab.job("eager", lengths=lab.args.lengths), "eager")


def compare_eager(lab: Lab, pred: dict, m: dict, out: Out) -> dict:
    rows = []
    prev = None
    first_fail = None
    for p, r in zip(pred["rows"], m["rows"], strict=True):
        e, s = r["eager"], r["sdpa"]
        extra = e["peak"] - s["peak"] if e["ok"] and s["ok"] else None
        growth = ""
        if extra is not None and prev is not None:
            factor = extra / prev[1]
            step = r["tokens"] / prev[0]
            growth = f"   grew x{factor:.2f} for N x{step:g} (N² predicts x{step**2:g})"
        out(
            f"  N={r['tokens']:>7}: eager {'held' if e['ok'] else 'OOM'} peak {b(e['peak'])}; sdpa "
            f"{'held' if s['ok'] else 'OOM'} peak {b(s['peak'])}; eager − sdpa {b(extra)} vs scores "
            f"{b(p['scores_bytes'])} ({diff_text(extra, p['scores_bytes'])}){growth}"
        )
        if first_fail is None and not e["ok"] and s["ok"]:
            first_fail = r["tokens"]
        if extra is not None:
            prev = (r["tokens"], extra)
        rows.append({**r, "eager_minus_sdpa": extra, "predicted_scores": p["scores_bytes"]})
    out(
        f"  eager failed where sdpa held first at N = {first_fail or 'none'} "
        f"(predicted {pred['predicted_first_failure'] or 'none'})"
    )
    cause = (
        "eager holds the bf16 scores, their fp32 softmax copy and the bf16 cast back at once, plus the N x N "
        "causal mask; the planner counts the scores and the fp32 copy"
    )
    out(f"  likely cause of the difference: {cause}")
    return {
        "rows": rows,
        "first_failure": first_fail,
        "predicted_first_failure": pred["predicted_first_failure"],
        "cause": cause,
    }


# ------------------------------------------------------------------------------------ fragment
VARIANTS = (
    ("dynamic", "dynamic", {}),
    ("static", "static", {}),
    ("expandable", "dynamic", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
)


def predict_fragment(lab_model: LabModel, args, cap: int, out: Out) -> dict | int:
    from planner.kv import kv_bytes_for_sequence  # noqa: PLC0415

    spec, n = lab_model.spec, args.prompt + args.tokens
    dynamic = args.batch * kv_bytes_for_sequence(spec, n)
    static = args.batch * kv_bytes_for_sequence(spec, n + 1)
    out(
        f"  DynamicCache after {n} tokens x {args.batch} sequences: {b(dynamic)} ({gib(dynamic)}), "
        "grown a token at a time"
    )
    out(f"  StaticCache sized once for {n + 1} tokens: {b(static)}, allocated once")
    out(
        "  expected gap: DynamicCache leaves freed blocks behind as it regrows (reserved − allocated climbs);"
    )
    out("  StaticCache allocates once (flat); expandable_segments grows segments in place (small gap)")
    p = plan(
        lab_model,
        cap,
        context=args.prompt,
        output_tokens=args.tokens,
        users=args.batch,
        prefill_chunk=args.batch * args.prompt,
    )
    if not p.fits:
        code = too_large(out, args, f"batch {args.batch} x {n} tokens does not fit in {gib(cap)}")
        if code is not None:
            return code
    return {"dynamic_kv_bytes": dynamic, "static_kv_bytes": static}


def run_fragment(lab: Lab, pred: dict) -> dict:
    a = lab.args
    results = {}
    for name, cache, env in VARIANTS:
        lab.out(
            f"  -- {name}: a fresh process "
            f"({'PYTORCH_CUDA_ALLOC_CONF=' + env['PYTORCH_CUDA_ALLOC_CONF'] if env else cache + ' cache'})"
        )
        job = lab.job(
            "fragment",
            variant=cache,
            label=name,
            batch=a.batch,
            prompt=a.prompt,
            tokens=a.tokens,
            every=a.every,
        )
        results[name] = lab.run_child(job, name, env)
    return results


def compare_fragment(lab: Lab, pred: dict, m: dict, out: Out) -> dict:
    cpu = lab.args.device == "cpu"
    key = "rss_gap" if cpu else "gap"
    what = (
        "RSS growth − live tensor growth (glibc's heap; the CPU has no caching allocator, so no "
        "reserved − allocated)"
        if cpu
        else "reserved − allocated"
    )
    out(f"  gap = {what}, every {lab.args.every} tokens:")
    out(f"  {'tokens':>8}" + "".join(f"{name:>16}" for name, _, _ in VARIANTS))
    series = {name: m[name]["series"] for name, _, _ in VARIANTS}
    for i in range(max(len(s) for s in series.values())):
        tok = next(s[i]["token"] for s in series.values() if i < len(s))
        cells = "".join(f"{(gib(s[i][key]) if i < len(s) else ''):>16}" for s in series.values())
        out(f"  {tok:>8}{cells}")
    final = {}
    for name, cache, _env in VARIANTS:
        r = m[name]
        predicted = pred["static_kv_bytes"] if cache == "static" else pred["dynamic_kv_bytes"]
        last = r["series"][-1] if r["series"] else {}
        final[name] = {
            "gap": last.get(key),
            "cache_bytes": r.get("cache_bytes"),
            "predicted_cache_bytes": predicted,
            "segments": r.get("segments"),
            "retries": r.get("retries"),
            "ok": r["ok"],
        }
        out(
            f"  {name:>10}: final gap {gib(last.get(key))}   cache {b(r.get('cache_bytes'))} vs planner "
            f"{b(predicted)} ({diff_text(r.get('cache_bytes'), predicted)})"
            + ("" if r["ok"] else f"   OUT OF MEMORY: {r['error']}")
        )
    verdict = fragment_verdict(final["dynamic"]["gap"], final["static"]["gap"], cpu)
    out(f"  {verdict}")
    if cpu:
        out(
            "  on the CPU: PYTORCH_CUDA_ALLOC_CONF does nothing, so 'expandable' repeats 'dynamic'; "
            "the GPU run "
            "shows the allocator's gap"
        )
    return {"gap_field": key, "series": series, "final": final, "verdict": verdict, **pred}


def fragment_verdict(dynamic_gap: int | None, static_gap: int | None, cpu: bool) -> str:
    """The prediction (the DynamicCache's gap ends above the StaticCache's) against the final gaps measured,
    said either way."""
    if dynamic_gap is None or static_gap is None:
        return "prediction not checked: a final gap was not measured"
    figures = f"final gap dynamic {gib(dynamic_gap)}, static {gib(static_gap)}"
    if dynamic_gap > static_gap:
        return f"as predicted: the DynamicCache's gap ends above the StaticCache's ({figures})"
    where = (
        ": on the CPU the gap is RSS growth less live tensor growth (glibc's heap), not a caching "
        "allocator's cache, which the prediction is about (a GPU run measures that)"
        if cpu
        else ""
    )
    opposite = "the opposite of the prediction: the StaticCache's gap is not below the DynamicCache's"
    return f"{opposite} ({figures}){where}"


# ------------------------------------------------------------------------------------ two
def predict_two(lab_model: LabModel, args, cap: int, out: Out) -> dict | int:
    from planner.formats import weight_bytes  # noqa: PLC0415

    weights = weight_bytes(lab_model.spec).total
    if args.device == "cuda":
        dev = nvml_first_device()
        if dev is None or dev.total is None:
            raise CollectorError("lab two on a GPU needs NVML's device total (nvidia-ml-py); none here")
        claim = args.claim_bytes or max(0, int(_vllm_utilization() * dev.total) - weights)
        available = dev.free if not dev.unified else None
        where = "GPU 0 free (NVML)"
    else:
        if not args.claim_bytes:
            raise CollectorError(
                "lab two on the CPU needs --claim-gib X (the GPU default, 90% of the device, "
                "would take this machine's memory from everyone on it)"
            )
        claim = args.claim_bytes
        available = None
        where = ""
    if available is None:
        from planner.machines import this_machine  # noqa: PLC0415

        m = this_machine()
        available = m.capacity_bytes  # replaced below by MemAvailable
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
        where = "MemAvailable (the whole machine's, as on unified memory)"
    each = weights + claim
    out(f"  each process: weights {b(weights)} + claim {b(claim)} = {b(each)} ({gib(each)})")
    out(f"  available now: {b(available)} ({gib(available)}, {where})")
    left = available - each
    fits = left >= each
    out(
        f"  after the first: {b(left)} left; the second needs {b(each)} -> predicted: "
        f"{'the second FITS' if fits else 'the second DOES NOT FIT'}"
    )
    return {
        "claim_bytes": claim,
        "weights_bytes": weights,
        "each_bytes": each,
        "available_bytes": available,
        "second_fits_predicted": fits,
    }


def run_two(lab: Lab, pred: dict) -> dict:
    a = lab.args
    job = lab.job("two", claim_bytes=pred["claim_bytes"], hold_s=a.hold)
    first = lab.start_child(job, "first")
    first[3].wait(timeout=600)
    state = lab.monitor.state()
    oom0 = state.os.oom_kill if state.os else None
    avail_between = state.os.mem_available if state.os else None
    second = lab.start_child(dict(job, hold_s=a.hold), "second")
    codes = {}
    results = {}
    for tag, (proc, out_path, log_path, _ready, thread) in (("first", first), ("second", second)):
        codes[tag] = lab.wait(proc, thread)
        try:
            results[tag] = lab.result(codes[tag], out_path, log_path, tag)
        except CollectorError as exc:
            results[tag] = {"claimed": False, "error": str(exc), "pid": proc.pid}
        results[tag].setdefault("pid", proc.pid)
    lab.monitor.sample_once()
    state = lab.monitor.state()
    oom1 = state.os.oom_kill if state.os else None
    return {
        "results": results,
        "exit_codes": codes,
        "mem_available_between": avail_between,
        "oom_kill_before": oom0,
        "oom_kill_after": oom1,
    }


def compare_two(lab: Lab, pred: dict, m: dict, out: Out) -> dict:
    for tag in ("first", "second"):
        r = m["results"][tag]
        rss = lab.max_rss.get(r.get("pid"))
        r["max_rss"] = rss
        out(
            f"  {tag}: pid {r.get('pid')}, exit {m['exit_codes'][tag]}, "
            + ("claimed and held its budget" if r.get("claimed") else f"FAILED: {r.get('error')}")
            + f"; largest resident size seen {b(rss)} vs predicted {b(pred['each_bytes'])} "
            f"({diff_text(rss, pred['each_bytes'])}: the interpreter, torch and its libraries"
            f"{', and the CUDA context' if lab.args.device == 'cuda' else ''} "
            "are outside the planner's buckets)"
        )
    second_ok = bool(m["results"]["second"].get("claimed"))
    out(f"  MemAvailable between the two starts: {gib(m['mem_available_between'])}")
    kills = None
    if m["oom_kill_before"] is not None and m["oom_kill_after"] is not None:
        kills = m["oom_kill_after"] - m["oom_kill_before"]
        out(f"  OOM kills seen in /proc/vmstat meanwhile: {kills}")
    pids = {m["results"][t].get("pid") for t in ("first", "second")}
    alerts = [a for a in lab.alerts if a.pid in pids or a.kind in ("headroom", "oom_kill")]
    for a in alerts:
        out(f"  memsight alert: [{a.severity}] {a.kind}: {a.message}")
    if not alerts:
        out(
            f"  memsight raised no alert (a new process alerts over {gib(lab.args.new_process_bytes)}, "
            f"a process growing over {gib(lab.args.growth_bytes)} in 30 s)"
        )
    out(
        f"  the second {'fitted' if second_ok else 'failed'}; predicted: "
        f"{'fits' if pred['second_fits_predicted'] else 'does not fit'}"
    )
    return {
        **pred,
        "second_fitted": second_ok,
        "oom_kills": kills,
        "alerts": [
            {"kind": a.kind, "severity": a.severity, "message": a.message, "pid": a.pid} for a in alerts
        ],
        "processes": m["results"],
        "exit_codes": m["exit_codes"],
    }


PREDICT = {
    "edge": predict_edge,
    "logits": predict_logits,
    "eager": predict_eager,
    "fragment": predict_fragment,
    "two": predict_two,
}
RUN = {"edge": run_edge, "logits": run_logits, "eager": run_eager, "fragment": run_fragment, "two": run_two}
COMPARE = {
    "edge": compare_edge,
    "logits": compare_logits,
    "eager": compare_eager,
    "fragment": compare_fragment,
    "two": compare_two,
}


# ------------------------------------------------------------------------------------ main
def cuda_problem(args) -> str | None:
    """Why --device cuda cannot run here (None: it can, or NVML cannot tell and the child will)."""
    from collectors.nvml_collector import NVMLCollector  # noqa: PLC0415

    c = NVMLCollector()
    try:
        snap = c.sample()
    finally:
        c.close()
    if snap.available and snap.devices:
        return None
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"],
        capture_output=True,
        timeout=120,
    )
    if probe.returncode == 0:
        return None
    why = (
        "torch is not installed"
        if b"ModuleNotFoundError" in probe.stderr
        else "torch.cuda.is_available() is False"
    )
    return f"--device cuda, but this machine has no usable CUDA GPU ({why}; NVML: {snap.status})"


def main(args: argparse.Namespace, name: str) -> int:
    exp = args.experiment
    if exp is None:
        raise CollectorError(
            "memsight lab needs an experiment: edge, logits, eager, fragment or two "
            "(memsight lab EXPERIMENT --help)"
        )
    out = Out(args.json)
    lab_model = resolve_model(args.model)
    if args.device == "cuda":
        problem = cuda_problem(args)
        if problem is not None:
            print(
                f"memsight: {problem}; run it on the CPU with --device cpu (and a small model)",
                file=sys.stderr,
            )
            return 2
    cap, cap_source = capacity_bytes(args, lab_model)
    _say_prediction_basis(out, exp, lab_model, args, cap, cap_source)
    pred = PREDICT[exp](lab_model, args, cap, out)
    if isinstance(pred, int):
        return pred
    record = args.record or f"memsight-lab-{exp}-{os.getpid()}.jsonl"
    lab = _start_lab(args, lab_model, out, record)
    out(f"RUN (recording to {record}; agent injected; every trial is a marked step)")
    measured = _run_lab(lab, exp, pred)
    if isinstance(measured, int):
        return measured
    if measured is None:
        print(
            f"memsight: interrupted; the workload was stopped; the recording so far is in {record}",
            file=sys.stderr,
        )
        return 130
    out("MEASURED vs PREDICTED")
    result = COMPARE[exp](lab, pred, measured, out)
    result = {
        "experiment": exp,
        "model": lab_model.spec.name,
        "device": args.device,
        "cap_bytes": cap,
        "recording": record,
        **result,
    }
    append_lab_event(record, result)
    out(f"recording: {record} (memsight replay {record} --model {lab_model.source}: the plan of this model)")
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    return 0


def _start_lab(args: argparse.Namespace, lab_model: LabModel, out: Out, record: str) -> Lab:
    """The run's private agent directory, its recording monitor (started) and its work directory."""
    from collectors import agent_format  # noqa: PLC0415

    agent_dir = agent_format.ensure_private_dir(tempfile.mkdtemp(prefix="memsight-lab-agents-"))
    monitor = _lab_monitor(args, agent_dir, record)
    monitor.start()
    workdir = tempfile.mkdtemp(prefix="memsight-lab-")
    return Lab(
        args=args,
        model=lab_model,
        out=out,
        record=record,
        agent_dir=agent_dir,
        workdir=workdir,
        monitor=monitor,
    )


def _run_lab(lab: Lab, exp: str, pred: dict) -> dict | int | None:
    """The experiment's children, measured: their result; None when interrupted (Ctrl-C); 2 when the
    child finds no CUDA device (said on stderr). The children, the monitor and the directories are
    stopped and removed whatever happened."""
    import shutil  # noqa: PLC0415

    try:
        return RUN[exp](lab, pred)
    except KeyboardInterrupt:
        return None
    except NoCuda as exc:
        print(f"memsight: --device cuda, but {exc}; run it on the CPU with --device cpu", file=sys.stderr)
        return 2
    finally:
        lab.stop_children()
        lab.monitor.sample_once()
        lab.monitor.stop()
        shutil.rmtree(lab.workdir, ignore_errors=True)
        shutil.rmtree(lab.agent_dir, ignore_errors=True)


def _say_prediction_basis(
    out: Out, exp: str, lab_model: LabModel, args: argparse.Namespace, cap: int, cap_source: str
) -> None:
    """The run's first lines: the model and device, then what the prediction is measured against."""
    weights_note = (
        f"real weights from {lab_model.weights_dir}"
        if lab_model.weights_dir
        else "random weights from the config"
    )
    out(f"memsight lab {exp}: {lab_model.spec.name} ({lab_model.dtype}, {weights_note}) on {args.device}")
    if exp == "two":  # its verdict is the second claim against the memory available now, not a capacity
        capped = f"each process capped at {b(cap)} ({cap_source})" if args.cap_bytes else "no cap"
        out(f"PREDICTION (each process's claim against the memory available now, below; {capped})")
    else:
        out(
            f"PREDICTION (planner; capacity {b(cap)} = {gib(cap)}, {cap_source}; overhead 0: the cap counts "
            "tensors only)"
        )


def _lab_monitor(args: argparse.Namespace, agent_dir: str, record: str) -> Monitor:
    """The monitor that records the trials: every agent record kept (a trial can be shorter than a tick)."""
    from collectors.alerts import AlertOptions  # noqa: PLC0415
    from collectors.monitor import Monitor  # noqa: PLC0415

    alert_options = AlertOptions(
        new_process_bytes=getattr(args, "new_process_bytes", GiB),
        growth_bytes=getattr(args, "growth_bytes", 2 * GiB),
    )
    return Monitor(
        hz=args.hz,
        agent_dir=agent_dir,
        record_to=record,
        discover_interval_s=0.5,
        alert_options=alert_options,
        agent_record_hz=math.inf,
    )


def append_lab_event(record: str, result: dict) -> None:
    """The result joins the recording as a {"k": "lab"} line (replay and summaries skip kinds they do not
    read), so the measured series stay with the samples they came from."""
    with open(record, "a", encoding="utf-8") as f:
        f.write(json.dumps({"k": "lab", "t": time.time(), "result": result}, default=str) + "\n")
