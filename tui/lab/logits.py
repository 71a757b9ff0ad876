"""`memsight lab logits`: every position's logits vs only the last one's, the tensor nobody needed.

The planner predicts the all-logits tensor (ctx x vocab x dtype bytes) and the activation peak either way; the
child runs one forward pass of each; the comparison shows the measured difference between the two peaks
against that tensor, and its likely cause.
"""

from __future__ import annotations

from tui.cmd_lab import Lab, LabModel, Out, b, diff_text, dtype_bytes_of, gib, plan, too_large


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
