"""TP/PP vLLM logs: the Live screen's vLLM line and bucket table say their figures are one rank's ("per rank,
TP=2: Worker_TP0's figures") and give the whole job's total where every rank logged its buckets, else why
not; "outside vLLM's accounting" compares NVML's per-process sum with that whole-job total. Real logs
(tests/data/vllm_logs), streamed by a real child under the app."""

from __future__ import annotations

from collectors.vllm_log_follow import log_buckets
from planner.engines.vllm.log import parse_log
from tests.tui.test_vllm_live import LOGS, _live_line, _vllm_comparison

GIB = 2**30
PP2 = "issue14452_v0.8.5dev_qwq32b-bnb_pp2_rtx5090.log"  # two stages, each logged its four buckets
TP2 = "llmdplanner_v0.19.0_h100_llama31-8b_tp2.log"  # V1: only Worker_TP0 logged the KV pool


def _log(name: str):
    return parse_log((LOGS / name).read_text(encoding="utf-8"))


def test_log_buckets_say_which_rank_of_how_many_and_the_whole_job_when_every_rank_logged():
    log = _log(PP2)
    b = log_buckets(log)
    # the stage with the smallest pool, as before; the job has two ranks (the log names no TP/PP sizes)
    assert (b.rank, b.world, b.tp, b.pp) == ("VllmWorkerProcess pid=12897", 2, 0, 0)
    # the job: each rank's four logged buckets (no CUDA graph lines in this V0 log), summed
    by_rank: dict[str, int] = {}
    for name in ("weights", "kv_pool", "activation", "non_torch"):
        for fig in log.figures[name]:
            by_rank[fig.rank] = by_rank.get(fig.rank, 0) + fig.bytes
    assert set(by_rank) == {"", "VllmWorkerProcess pid=12897"}
    assert b.job_total == sum(by_rank.values()) and b.job_missing == ""
    assert round(b.job_total / GIB, 2) == 53.32  # 26.66 + 26.66 GiB, each stage's budget as logged

    tp2 = log_buckets(_log(TP2))
    assert (tp2.rank, tp2.world, tp2.tp, tp2.pp) == ("Worker_TP0", 2, 2, 1)
    assert tp2.job_total is None and tp2.job_missing == "Worker_TP1 logged no KV pool"
    one = log_buckets(_log("pr10511_v0.6.5dev_llama3-8b_h100_tp1.log"))
    assert (one.world, one.job_total, one.job_missing) == (1, None, "")
    cut = log_buckets(_log("pr10511_v0.6.5dev_llama3-8b_h100_tp2_cut.log"))  # TP=2, one rank's lines
    assert cut.world == 2 and cut.job_missing.endswith("1 of 2 ranks logged no buckets")


async def test_a_tp2_log_is_drawn_as_one_ranks_figures_and_says_so(tmp_path):
    text, app = await _live_line(tmp_path, TP2, nvml_gib=60.0)
    head = "vLLM 0.19.0 (from vLLM's log; per rank, TP=2: Worker_TP0's figures): weights 7.51"
    assert text.startswith(head)
    assert "| whole job: not in the log (Worker_TP1 logged no KV pool)" in text
    # NVML's per-process figure is not set against one rank's figures
    assert "outside vLLM's accounting" not in text
    c = _vllm_comparison(app)
    pid = app.child.pid
    title = f" · vLLM 0.19.0 (pid {pid}, per rank, TP=2: Worker_TP0's figures from vLLM's log)"
    assert title in c.title  # (then " · last figures, ended at ..." once the child exited)
    job = "the bars: one rank of 2 (one GPU each) · whole job: not in the log (Worker_TP1 logged no KV pool)"
    assert job in c.notes
    assert not any(n.startswith("outside vLLM's accounting") for n in c.notes)
    assert c.measured_bytes("kv") == round(63.76 * GIB)  # Worker_TP0's pool, as logged


async def test_a_pp2_log_gives_the_whole_job_and_what_is_outside_vllms_accounting(tmp_path):
    text, app = await _live_line(tmp_path, PP2, nvml_gib=60.0)
    head = ("vLLM (from vLLM's log; per rank, 2 ranks logged: VllmWorkerProcess pid=12897's figures): "
            "weights 10.30")  # fmt: skip
    assert text.startswith(head)
    assert "| whole job, 2 ranks: 53.32 GiB (every rank's buckets, log)" in text
    assert "| outside vLLM's accounting 6.68 GiB (NVML 60.00 - vLLM 53.32)" in text
    c = _vllm_comparison(app)
    job = "the bars: one rank of 2 (one GPU each) · whole job, 2 ranks: 53.32 GiB (every rank's buckets, log)"
    assert job in c.notes
    outside = "outside vLLM's accounting 6.68 GiB (NVML per-process 60.00 - vLLM's own, 2 ranks 53.32)"
    assert outside in c.notes
