"""The Plan screen's fields show the inputs the plan on screen was computed from: while it follows an agent's
growing cache (no field ever taken for a user's edit because the app filled it), and after the user types a
model and a context of their own (issue 21, item 1). Real Textual screens, agent info documents shaped as
the agent writes them."""

from __future__ import annotations

from dataclasses import replace

from textual.widgets import Input, Select

from planner.budget import make_plan
from tests.tui.fixed_states import FixedMonitor
from tests.tui.test_autotrack_view import BASE, info_doc, planned_fp32, state_with
from tui.app import MemsightApp
from tui.screens.plan import PlanScreen


def _fields(app) -> dict[str, str]:
    out = {}
    for name in ("model", "format", "kv_dtype", "context", "users", "tp"):
        widget = app.screen.query_one(f"#plan-{name}")
        out[name] = "" if widget.value is Select.BLANK else str(widget.value)
    return out


class GrowingCache(FixedMonitor):
    """An agent whose cache grows by 5 tokens at every state the app reads (a decode under way)."""

    def __init__(self, batch: int = 3) -> None:
        self.tokens = 100
        self.batch = batch
        super().__init__(self._state())

    def _state(self):
        return state_with(info_doc(4121, params=planned_fp32(), tokens=self.tokens, batch=self.batch))

    def state(self):
        self.tokens += 5
        self.current = self._state()
        return self.current


async def test_a_field_the_app_fills_is_never_taken_for_an_edit():
    """The screen fills the followed fields as the cache grows; the Changed events of those fills used to
    come back as the user's edits (racing the next tick), freezing the context at an old length and labelling
    it "given". Now the fields follow every tick and nothing counts as edited."""
    monitor = GrowingCache()
    app = MemsightApp(monitor, source_label="t", plan_inputs=BASE, refresh_hz=50)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        posted = []
        app.screen.post_message = lambda m, _post=app.screen.post_message: posted.append(m) or _post(m)
        for _ in range(30):  # ticks of the app's own timer interleaved with the screen's messages
            app.refresh_data()
            await pilot.pause(0.01)
        app.refresh_data()  # no await from here to the reads: no tick in between
        fields = _fields(app)
        planned = app.plan_follow.inputs
        await pilot.pause()
        edits = [m for m in posted if isinstance(m, PlanScreen.InputsEdited)]
        await pilot.press("q")
    assert app._edited == frozenset() and "context" not in app.plan_explicit
    assert edits == []  # no InputsEdited without a key typed
    assert fields["context"] == str(planned.context) and planned.context >= 100 + 5 * 30
    assert fields["users"] == "3"


async def test_typed_model_and_context_the_fields_show_what_is_planned():
    """Issue 21's steps: with an agent attached (an fp32 model, batch 3), type qwen3-8b, then 32k. The fields
    must read what both screens plan: the typed model and context, the agent's batch, the format given at
    startup (no longer the loaded model's); the Plan screen's bars and the Live screen's row are that one
    plan (before: the fields kept fp32 and users 3 while the bars planned other inputs)."""
    state = state_with(info_doc(4121, params=planned_fp32(), tokens=300, batch=3))
    app = MemsightApp(FixedMonitor(state), source_label="t", plan_inputs=BASE)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        assert _fields(app)["format"] == "fp32"  # followed: the loaded model's dtype
        for name, text in (("model", "qwen3-8b"), ("context", "32k")):
            field = app.screen.query_one(f"#plan-{name}", Input)
            field.focus()
            field.value = ""
            await pilot.press(*text, "enter")
            await pilot.pause()
        app.refresh_data()
        await pilot.pause()
        fields = _fields(app)
        bars = {b.key: b for b in app.plan_view.bars}
        live = app.live_view.comparisons[0]
        follows = str(app.screen.query_one("#plan-follows").content)
        await pilot.press("q")
    follow = app.plan_follow
    assert follow is not None and follow.inputs.model == "qwen3-8b" and follow.inputs.context == 32768
    # the agent's batch; the format of the inputs as given (bf16), no longer the loaded model's fp32
    assert (follow.inputs.users, follow.inputs.format) == (3, BASE.format) == (3, "bf16")
    assert fields == {"model": "qwen3-8b", "format": "bf16", "kv_dtype": "auto", "context": "32k",
                      "users": "3", "tp": "1"}  # fmt: skip
    plan = make_plan(replace(follow.inputs, machine="h100"))
    assert plan.weights.format == "bf16" and bars["h100"].max_users == plan.max_users
    assert live.plan_label.startswith("qwen3-8b bf16, KV auto, 32,768 ctx × 3 users")
    assert follows.startswith("following pid 4121's cache (its model: qwen3-8b, given): ")
