"""`memsight lab eager`: eager attention's N x N score matrices vs SDPA, at growing lengths.

The planner predicts the score matrices (heads x N² x (dtype + fp32 softmax copy) bytes) and where eager first
fails while SDPA holds; the child prefills each length both ways; the comparison shows eager − SDPA growing as
N² against the predicted scores, and where eager failed first.
"""

from __future__ import annotations

from tui.cmd_lab import Lab, LabModel, Out, b, diff_text, dtype_bytes_of, gib, plan, too_large


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
