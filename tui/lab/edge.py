"""`memsight lab edge`: the edge, the largest batch that holds a --ctx-token prefill and a few decode steps.

The planner predicts it (weights + KV per sequence + the prefill's activation peak, the whole batch in one
pass, and again with --prefill-chunk); the child binary-searches it for real; the comparison shows the
prefill spike at the edge, what stayed allocated after decoding, the first failure's fragmentation (reserved −
allocated), and the likely cause of any difference (edge_cause).
"""

from __future__ import annotations

from tui.cmd_lab import Lab, LabModel, Out, b, diff_text, dtype_bytes_of, gib, largest_users, plan, too_large


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
