"""The Plan screen (key 2) plans what the Live screen's plan row follows: vLLM's log under `memsight run
-- vllm serve ...` (its model and engine arguments, each labelled with where it came from), a transformers
agent's loaded model; the user's flags and edits still win. Real child processes printing real vLLM logs
(tests/data/vllm_logs), real Textual screens."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

from textual.widgets import Input, Select, Static

from planner.budget import make_plan
from planner.engines.vllm.explain import explain
from planner.engines.vllm.log import parse_log
from tests.tui.fixed_states import FixedMonitor, two_rank_state
from tests.tui.test_vllm_live import LOGS, PRINTER
from tui import cmd_run
from tui.app import FIGURE_MACHINES, MemsightApp
from tui.screens.plan import figure_note

GIB = 2**30
GPT_OSS = "myoceane_v0.19.0_gpt-oss-20b_a100.log"  # names its model (in the catalog), version and args


def _text(app, selector: str) -> str:
    widget = app.screen.query_one(selector, Static)
    return str(widget.content) if widget.display else ""


def _fields(app) -> dict[str, str]:
    out = {}
    for name in ("model", "format", "kv_dtype", "context", "users", "tp"):
        widget = app.screen.query_one(f"#plan-{name}")
        blank = isinstance(widget, Select) and widget.value is Select.BLANK
        out[name] = "" if blank else str(widget.value)
    return out


async def _run_plan(tmp_path, log_name: str, check, **app_kwargs):
    """Stream `log_name` from a real child under the app, open the Plan screen (key 2) once the whole log was
    read, and call `await check(app, pilot)` there."""
    log = tmp_path / "child.log"
    go = tmp_path / "exit-now"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-c", PRINTER, str(LOGS / log_name), str(go)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    child = cmd_run.RunChild(proc, "vllm serve ...", log)
    app = MemsightApp(FixedMonitor(two_rank_state()), source_label="t", child=child, **app_kwargs)
    expected = parse_log((LOGS / log_name).read_text(encoding="utf-8"))
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("2")  # on the Plan screen from the start: it follows the log as it streams
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and app._vllm_follow.poll() != expected:
                app.refresh_data()
                await pilot.pause(0.05)
            assert app._vllm_follow.poll() == expected
            app.refresh_data()
            await pilot.pause()
            deadline = time.monotonic() + 30  # its own wait: the log's may have used most of the first
            while time.monotonic() < deadline and not _text(app, "#plan-follows"):  # a loaded machine
                app.refresh_data()
                await pilot.pause(0.05)
            await check(app, pilot)
            go.touch()
            proc.wait(timeout=20)
            await pilot.press("q")
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
    return app


async def test_the_plan_screen_follows_vllms_log_with_each_inputs_source(tmp_path):
    log = parse_log((LOGS / GPT_OSS).read_text(encoding="utf-8"))
    seen = {}

    async def check(app, pilot):
        seen["fields"] = _fields(app)
        seen["follows"] = _text(app, "#plan-follows")
        seen["bars"] = {b.key: b for b in app.plan_view.bars}
        seen["summary"] = _text(app, "#plan-summary")
        seen["note"] = _text(app, "#plan-note")

    app = await _run_plan(tmp_path, GPT_OSS, check)
    ex = explain(log, total_bytes=app.state.nvml.devices[0].total)
    pool = ex.pool
    # the fields: what vLLM loaded, with its arguments (the log's max_model_len; as users, the sequences
    # at that length vLLM runs at once: max_num_seqs, or fewer when its pool holds fewer)
    assert seen["fields"] == {
        "model": "openai/gpt-oss-20b",
        "format": "mxfp4",
        "kv_dtype": "auto",
        "context": str(pool.max_model_len),
        "users": str(min(pool.max_num_seqs, int(pool.max_concurrency))),
        "tp": "1",
    }
    assert pool.max_model_len == 131_072 and seen["fields"]["users"] == "11"  # 11.03x < 1024 sequences
    follows = seen["follows"]
    assert follows.startswith(f"following vLLM's log (pid {app.child.pid}): model openai/gpt-oss-20b (what "
                              "vLLM loaded, log)")  # fmt: skip
    assert "max_model_len 131072 (log)" in follows and "gpu_memory_utilization 0.65 (log)" in follows
    users = (f"users 11 = min(max_num_seqs {pool.max_num_seqs} (vLLM 0.19.0's default), vLLM's max "
             f"concurrency {pool.max_concurrency:.2f}x PREDICTED), each at max_model_len")  # fmt: skip
    assert users in follows
    assert f"prefill chunk {pool.max_num_batched_tokens:,} = max_num_batched_tokens (" in follows
    # vLLM's own model for the same inputs, the Live screen's vLLM plan row
    assert f"vLLM's own model, on the device it runs on: KV pool {pool.pool_bytes / GIB:,.2f} GiB" in follows
    # each machine's bar is the planner's plan of those inputs
    for name in FIGURE_MACHINES[:-1]:
        plan = make_plan(replace(app.plan_follow.inputs, machine=name))
        assert plan.inputs.model == "openai/gpt-oss-20b" and plan.inputs.context == 131_072
        assert seen["bars"][name].max_users == plan.max_users
        assert seen["bars"][name].segments[2].bytes == plan.kv_bytes
    assert seen["summary"].startswith("openai/gpt-oss-20b, mxfp4 weights")
    # the note under the figure names the followed prefill chunk (8K unless one is followed)
    chunk = pool.max_num_batched_tokens
    assert seen["note"] == figure_note(None if chunk == 8192 else chunk)
    assert "the activation peak of an 8K-token prefill chunk." in figure_note(None)
    followed = "the activation peak of a prefill chunk of 2,048 tokens (the plan follows it)."
    assert followed in figure_note(2048)


async def test_flags_and_plan_screen_edits_win_over_the_log_in_both_screens(tmp_path):
    name = "llmdplanner_v0.19.0_h100_llama31-8b_tp2.log"  # TP=2; its model is not in the cache: --model
    log = parse_log((LOGS / name).read_text(encoding="utf-8"))
    inputs = replace(MemsightApp(FixedMonitor(two_rank_state())).plan_inputs, model="llama-3.1-8b")
    seen = {}

    async def check(app, pilot):
        seen["before"] = _fields(app)
        seen["follows"] = _text(app, "#plan-follows")
        # the user types a context on the Plan screen: it wins, on this screen and in the Live vLLM row
        field = app.screen.query_one("#plan-context", Input)
        field.focus()
        field.value = "4096"
        await pilot.press("enter")
        for _ in range(20):
            app.refresh_data()
            await pilot.pause(0.05)
        seen["after"] = _fields(app)
        seen["follow"] = app.plan_follow
        seen["follows_after"] = _text(app, "#plan-follows")
        (seen["vllm"],) = [c for c in app.live_view.comparisons if " · vLLM" in c.title]

    app = await _run_plan(tmp_path, name, check, plan_inputs=inputs, plan_explicit=frozenset({"model"}))
    total = app.state.nvml.devices[0].total
    pool = explain(log, model="llama-3.1-8b", total_bytes=total).pool
    assert seen["before"]["model"] == "llama-3.1-8b" and seen["before"]["tp"] == "2"  # the log's TP
    assert seen["before"]["context"] == str(pool.max_model_len)
    assert "model llama-3.1-8b (given: flag or config file, wins over the log)" in seen["follows"]
    assert "tensor/pipeline parallel 2/1 (log/log)" in seen["follows"]
    assert seen["after"]["context"] == "4096" and seen["after"]["tp"] == "2"
    follow = seen["follow"]
    assert (follow.inputs.context, follow.inputs.tp, follow.inputs.model) == (4096, 2, "llama-3.1-8b")
    assert "max_model_len 4096 (given: flag or config file)" in seen["follows_after"]
    # the Live screen's vLLM row plans the same edit: vLLM's own model with max_model_len 4096 given
    given = explain(log, model="llama-3.1-8b", total_bytes=total, given={"max_model_len": "4096"}).pool
    assert seen["vllm"].planned_bytes("kv") == given.pool_bytes and given.max_model_len == 4096
    plan = make_plan(replace(follow.inputs, machine="h100"))
    assert {b.key: b for b in app.plan_view.bars}["h100"].max_users == plan.max_users


async def test_a_log_the_planner_cannot_read_keeps_the_startup_inputs_and_says_why(tmp_path):
    name = "pr10511_v0.6.5dev_llama3-8b_h100_tp1.log"  # its model is not in the cache, no version
    seen = {}

    async def check(app, pilot):
        seen["fields"] = _fields(app)
        seen["follows"] = _text(app, "#plan-follows")

    app = await _run_plan(tmp_path, name, check)
    assert app.plan_follow is None
    assert seen["fields"]["model"] == app.plan_inputs.model == "llama-3.1-8b"
    assert seen["follows"].startswith(f"vLLM's log (pid {app.child.pid}) cannot be planned: the log's model "
                                      "'meta-llama/Meta-Llama-3-8B' is not in the local cache")  # fmt: skip
    assert seen["follows"].endswith("; the bars plan the inputs below")


async def test_the_plan_screen_follows_a_transformers_agents_loaded_model():
    from tests.tui.test_autotrack_view import BASE, info_doc, planned_fp32, state_with  # noqa: PLC0415

    state = state_with(info_doc(4121, params=planned_fp32(), tokens=4096, batch=8))
    app = MemsightApp(FixedMonitor(state), source_label="t", plan_inputs=BASE)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        fields = _fields(app)
        follows = _text(app, "#plan-follows")
        h100 = {b.key: b for b in app.plan_view.bars}["h100"]
        live = app.live_view.comparisons[0]
        await pilot.press("q")
    assert fields == {"model": "pid 4121: LlamaForCausalLM", "format": "fp32", "kv_dtype": "fp32",
                      "context": "4096", "users": "8", "tp": "1"}  # fmt: skip
    assert follows == ("following pid 4121's loaded model: model: from pid 4121's loaded model · context: "
                       "from its cache, 4,096 tokens · batch 8 · fp32 as loaded · "
                       "KV fp32 as loaded")  # fmt: skip
    # the same plan as the Live screen's row for that process: the loaded config, its cache
    source = app.plan_follow
    plan = make_plan(replace(source.inputs, machine="h100"), spec=source.spec)
    assert h100.max_users == plan.max_users and h100.segments[2].bytes == plan.kv_bytes == 2048 * 4096 * 8
    assert live.planned_bytes("kv") == plan.kv_bytes


async def test_the_plan_screen_opened_after_the_log_was_read_shows_its_fields(tmp_path):
    """Opened late, the screen starts with the followed values (a Select set only after compose would show
    its prompt) and a refresh that reaches it before its fields are mounted waits for them (no crash)."""
    log = tmp_path / "child.log"
    go = tmp_path / "exit-now"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-u", "-c", PRINTER, str(LOGS / GPT_OSS), str(go)],
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    app = MemsightApp(FixedMonitor(two_rank_state()), source_label="t",
                      child=cmd_run.RunChild(proc, "vllm serve ...", log))  # fmt: skip
    expected = parse_log((LOGS / GPT_OSS).read_text(encoding="utf-8"))
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and app._vllm_follow.poll() != expected:
                app.refresh_data()
                await pilot.pause(0.05)
            app.refresh_data()
            app.switch_mode("plan")  # not awaited: the Plan screen is current, its fields not mounted yet
            app._push_to_screen()
            await pilot.pause()
            await pilot.pause()
            fields = _fields(app)
            labels = {name: str(app.screen.query_one(f"#plan-{name} #label", Static).content)
                      for name in ("format", "kv_dtype")}  # fmt: skip
            follows = _text(app, "#plan-follows")
            go.touch()
            proc.wait(timeout=20)
            await pilot.press("q")
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
    assert fields["model"] == "openai/gpt-oss-20b" and fields["format"] == "mxfp4"
    assert labels == {"format": "mxfp4", "kv_dtype": "auto"}  # what the Selects show, not their prompt
    assert follows.startswith(f"following vLLM's log (pid {proc.pid}): ")


async def test_a_view_pushed_before_the_plan_screen_mounted_does_not_overwrite_a_newer_one():
    """The race behind CI's empty "#plan-follows": a tick pushed a view while the screen was still mounting,
    a newer view (the log read whole) was shown as it mounted, then the deferred older one was drawn over it.
    The app pushes only what changes, so the older view stayed."""
    app = MemsightApp(FixedMonitor(two_rank_state()), source_label="t")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        older = app.plan_view
        assert older is not None and not older.follows
        app.switch_mode("plan")  # not awaited: the Plan screen is current, its fields not mounted yet
        app.screen.show(older)  # deferred until the fields are mounted
        app.plan_view = replace(older, follows="following a newer view")
        await pilot.pause()
        await pilot.pause()
        follows = _text(app, "#plan-follows")
        await pilot.press("q")
    assert follows == "following a newer view"


async def test_the_live_screen_plans_the_figure_machines_only_once_the_plan_screen_asks(monkeypatch):
    """Issue 20: the Live screen's ticks plan what the Live screen shows (the pools of this machine), not the
    Plan screen's capacity figure (a plan per machine of the lesson's figure); those are planned when the Plan
    screen is shown, and it shows every bar."""
    import planner.budget  # noqa: PLC0415

    planned: list[str] = []

    def counting(inputs, **kwargs):
        planned.append(inputs.machine)
        return make_plan(inputs, **kwargs)

    monkeypatch.setattr(planner.budget, "make_plan", counting)
    app = MemsightApp(FixedMonitor(two_rank_state()), source_label="t")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        for _ in range(3):
            app.refresh_data()
            await pilot.pause()
        assert app.live_view is not None and app.live_view.comparisons
        assert set(planned) == {"this"}
        await pilot.press("2")
        await pilot.pause()
        assert [b.key for b in app.plan_view.bars] == list(FIGURE_MACHINES)
        assert set(planned) == set(FIGURE_MACHINES)  # "this" among them
        await pilot.press("q")


async def test_a_view_shown_before_the_plan_screens_mount_handler_stays_shown():
    """On a loaded machine (CI, 2 cores) an app tick reached the Plan screen once its fields were mounted
    and before its own on_mount ran; on_mount then hid the followed line and put the startup values back,
    and the same view, already seen, was not shown again: the line stayed hidden for good. The same order,
    made here by running on_mount after the view was shown."""
    from tests.tui.test_autotrack_view import BASE, info_doc, planned_fp32, state_with  # noqa: PLC0415

    state = state_with(info_doc(4121, params=planned_fp32(), tokens=4096, batch=8))
    app = MemsightApp(FixedMonitor(state), source_label="t", plan_inputs=BASE)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        before = (_text(app, "#plan-follows"), _fields(app))
        app.screen.on_mount()
        await pilot.pause()
        after = (_text(app, "#plan-follows"), _fields(app))
        await pilot.press("q")
    assert before[0].startswith("following pid 4121's loaded model") and before[1]["context"] == "4096"
    assert after == before
