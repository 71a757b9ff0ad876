"""`memsight lab two`: two model-loading processes, each claiming its budget: does the second fit?

Each process's weights plus its claim (by default what a vLLM started today claims) is predicted against the
memory available now; two children load and claim one after the other; the comparison shows whether the second
fitted, each process's largest resident size against the prediction, OOM kills, and the alerts memsight
raised (a second process taking memory).
"""

from __future__ import annotations

from collectors.errors import CollectorError
from tui import cmd_lab
from tui.cmd_lab import Lab, LabModel, Out, b, diff_text, gib


def predict_two(lab_model: LabModel, args, cap: int, out: Out) -> dict | int:
    from planner.formats import weight_bytes  # noqa: PLC0415

    weights = weight_bytes(lab_model.spec).total
    if args.device == "cuda":
        dev = cmd_lab.nvml_first_device()
        if dev is None or dev.total is None:
            raise CollectorError("lab two on a GPU needs NVML's device total (nvidia-ml-py); none here")
        claim = args.claim_bytes or max(0, int(cmd_lab._vllm_utilization() * dev.total) - weights)
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
