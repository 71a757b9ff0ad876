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

This module is the command (its arguments, main, Lab, the helpers the experiments share); each experiment's
predict / run / compare lives in tui/lab/EXPERIMENT.py (EXPERIMENT_MODULES), imported when it runs.
"""

from __future__ import annotations

import argparse
import importlib
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
    from collections.abc import Callable

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


# ------------------------------------------------------------------------------------ the experiments
# experiment -> its module, tui/lab/EXPERIMENT.py, which defines predict_EXPERIMENT(lab_model, args, cap, out)
# (the prediction: a dict, or an exit status to stop at), run_EXPERIMENT(lab, prediction) (the children,
# measured) and compare_EXPERIMENT(lab, prediction, measured, out) (the result object), with the helpers
# only it uses; imported when the experiment runs, so `memsight lab --help` does not pay for the five
EXPERIMENT_MODULES = {experiment: f"tui.lab.{experiment}" for experiment in EXPERIMENTS}


def experiment_step(experiment: str, step: str) -> Callable[..., Any]:
    """`step` ("predict", "run" or "compare") of `experiment`: STEP_EXPERIMENT in its module (tui/lab/)."""
    module = importlib.import_module(EXPERIMENT_MODULES[experiment])
    return getattr(module, f"{step}_{experiment}")


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
    pred = experiment_step(exp, "predict")(lab_model, args, cap, out)
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
    result = experiment_step(exp, "compare")(lab, pred, measured, out)
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
        return experiment_step(exp, "run")(lab, pred)
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
