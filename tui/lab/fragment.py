"""`memsight lab fragment`: reserved − allocated over a token-by-token decode, with a DynamicCache, a
StaticCache and expandable_segments.

The planner predicts the cache's size (grown a token at a time, or allocated once); a fresh child per variant
decodes and snaps the gap every --every tokens; the comparison prints the three gap series side by side and
checks the prediction (the DynamicCache's gap ends above the StaticCache's) either way (fragment_verdict). On
the CPU the gap is RSS growth less live tensor growth: there is no caching allocator.
"""

from __future__ import annotations

from tui.cmd_lab import Lab, LabModel, Out, b, diff_text, gib, plan, too_large

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
