"""The targets the README states for `memsight lab`, in one place: asserted on the test's own runs
(tests/tui/test_lab.py, with torch) and on the figures the README shows (tests/test_readme_figures.py)."""

from __future__ import annotations


def assert_edge_targets(r: dict) -> None:
    """The README's targets for `lab edge` (the same function checks the README's own figures, in
    tests/test_readme_figures.py): the edge lands at or below the planner's max users (which assumes one
    prompt-sized prefill chunk); the prediction that prefills the whole batch at once lands on it, within 2%
    and at least one batch either way (the planner counts (4h + 3I) temporaries per token, not each operator's
    own); with chunked prefill the edge holds at most its prediction (each pass keeps every sequence's last
    logits and grows the cache with torch.cat, which the planner does not count)."""
    edge, predicted = r["edge"], r["predicted_edge"]
    assert edge <= r["planner_max_users"], r
    assert abs(edge - predicted) <= max(1, predicted * 2 // 100), (edge, predicted)
    if r.get("edge_chunked") is not None:
        assert r["edge_chunked"] <= r["predicted_edge_chunked"], r
