"""Huge input in the New-experiment form: a seed range such as ``0-99999999`` is counted, never listed; a grid over
the limit is refused on the bottom line and by Launch without being built; absurd seeds get a message; Ctrl+Q
still quits."""

from __future__ import annotations

import contextlib
import resource
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, SelectionList, Static

import gaptui.launch
import gaptui.presets
from engine.errors import GaptuiError
from gaptui.tui.app import GaptuiApp
from gaptui.tui.planning import MAX_GRID_RUNS, FormDraft, count_seeds, over_limit, parse_seeds
from gaptui.tui.screens.new_experiment import NewExperimentScreen
from gaptui.tui.widgets.plan_bar import OneAtATime
from gaptui.workspace import Workspace
from tests.support.tui import SIZE, notices, type_into
from tests.support.waiting import wait_until

HUGE = "0-99999999"
REFUSAL = "grid of 100,000,000 runs is over the limit of 100,000; narrow seeds or axes"
#: Python memory the form may take while it refuses the huge grid (listing its seeds alone takes gigabytes).
MEMORY_BUDGET = 200 * 2**20


@pytest.fixture
def address_space_cap() -> Iterator[None]:
    """2 GiB more address space than the process holds now, for the test: should the seeds be listed after all, the
    thread listing them meets a MemoryError (and the test fails) instead of taking the machine's memory."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    held = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    cap = held + 2 * 2**30
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def traced() -> Iterator[dict[str, int]]:
    """The peak of Python's allocations (every thread) over the block, in bytes."""
    out: dict[str, int] = {}
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        yield out
        out["peak"] = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def one_run_form(seeds: str) -> dict[str, Any]:
    """An alignment form of one dataset, one noise level and one model: the grid has one run per seed."""
    return {"datasets": [{"base": "er"}], "noise": [0.12], "models": ["gcn"], "seeds": seeds}


def test_counting_a_huge_seed_range_is_immediate_and_lists_nothing() -> None:
    draft = FormDraft("alignment", fields=one_run_form(HUGE))
    draft.grid_bound()  # the family's form fields imported before measuring
    with traced() as memory:
        start = time.perf_counter()
        assert count_seeds(HUGE) == 100_000_000
        assert count_seeds("0-99999999, 5, 50-1000000000") == 1_000_000_001
        assert draft.grid_bound() == (100_000_000, 100_000_000)
        with pytest.raises(GaptuiError) as refused:
            draft.preset()
        with pytest.raises(GaptuiError, match="over the limit"):
            draft.document()  # saving lists the seeds: refused too
        with pytest.raises(GaptuiError, match="100,000,000 values"):
            parse_seeds(HUGE)
        elapsed = time.perf_counter() - start
    assert str(refused.value) == REFUSAL == over_limit(100_000_000)
    assert elapsed < 1.0, f"counting took {elapsed:.2f} s"
    assert memory["peak"] < 2**20, f"counting allocated {memory['peak']} bytes"


def test_seed_ranges_keep_their_order_and_absurd_seeds_are_refused_by_name() -> None:
    assert parse_seeds("0-2, 5 1") == [0, 1, 2, 5]
    assert parse_seeds("3-5, 0-9, 4, 20..21, 8-12") == [3, 4, 5, 0, 1, 2, 6, 7, 8, 9, 20, 21, 10, 11, 12]
    assert count_seeds("3-5, 0-9, 4, 20..21, 8-12") == 15
    assert len(parse_seeds(f"0-{MAX_GRID_RUNS - 1}, 0-{MAX_GRID_RUNS - 1}")) == MAX_GRID_RUNS
    refused = {
        "0-1e9": "seeds: '0-1e9' is not an integer or a range like 0-9",
        "-5": "seeds: -5 is negative",
        "5-2": "seeds: '5-2' is an empty range (5 > 2); did you mean 2-5?",
        "99999999999999999999": "seeds: 99999999999999999999 is too large",
        "": "seeds: give at least one value",
    }
    for text, message in refused.items():
        with pytest.raises(GaptuiError) as exc:
            parse_seeds(text)
        assert str(exc.value).startswith(message), text


def test_the_limit_holds_the_exact_size_when_each_axis_is_small() -> None:
    # 8 levels x 2 trained models x 10,000 seeds: the axes are listed (each is small), the grid is over the limit
    wide = {
        **one_run_form("0-9999"),
        "noise": [0.04, 0.06, 0.08, 0.12, 0.15, 0.18, 0.24, 0.3],
        "models": ["gcn", "gin"],
    }
    with pytest.raises(GaptuiError, match=r"^grid of 160,000 runs is over the limit of 100,000"):
        FormDraft("alignment", fields=wide).preset()
    # the baseline is one run per level, not per seed: 8 x 10,000 + 8 runs, under the limit (the product is not)
    baseline = {**wide, "models": ["gcn", "laplacian"]}
    draft = FormDraft("alignment", fields=baseline)
    assert draft.grid_bound()[0] == 160_000
    assert draft.preset().size == 80_008


@pytest.mark.asyncio
async def test_huge_seeds_are_refused_at_once_launch_too_and_ctrl_q_still_quits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, address_space_cap: None
) -> None:
    built: list[int] = []  # the seeds of every grid built
    grid = gaptui.presets.grid

    def counted_grid(preset: Any, *args: Any, **kwargs: Any) -> list[Any]:
        built.append(len(preset.seeds))
        return grid(preset, *args, **kwargs)

    monkeypatch.setattr(gaptui.presets, "grid", counted_grid)
    app = GaptuiApp(Workspace(tmp_path / "ws"))
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        await wait_until(pilot, lambda: form.query_one("#models", SelectionList).option_count > 0, what="models")
        for key, value in (("models", "gcn"), ("noise", 0.12)):
            options = form.query_one(f"#{key}", SelectionList)
            options.deselect_all()
            options.select(value)
        await wait_until(pilot, lambda: form.summary is not None and form.summary.size == 1, what="the 1-run grid")
        plan = form.query_one("#plan", Static)

        with traced() as memory:
            await type_into(pilot, form.query_one("#seeds", Input), HUGE)
            await wait_until(pilot, lambda: str(plan.render()) == REFUSAL, what="the refusal on the bottom line")
            assert plan.has_class("error") and form.summary is None
            await pilot.press("ctrl+l")
            await pilot.pause()
            assert app.current_mode == "new" and notices(app)[-1] == REFUSAL
        assert memory["peak"] < MEMORY_BUDGET, f"the form allocated {memory['peak'] / 2**20:.0f} MiB"
        assert not app.state.queued and not any("launching" in n for n in notices(app))
        assert max(built) <= MAX_GRID_RUNS, f"a grid of {max(built)} seeds was built"

        # absurd seeds: a message on the bottom line, no traceback
        for text, message in (("0-1e9", "is not an integer"), ("-5", "is negative"), ("5-2", "empty range")):
            await type_into(pilot, form.query_one("#seeds", Input), text)
            await wait_until(pilot, lambda m=message: m in str(plan.render()), what=f"the message for {text}")
            assert str(plan.render()).startswith("seeds: ") and plan.has_class("error")

        await type_into(pilot, form.query_one("#seeds", Input), HUGE)
        await wait_until(pilot, lambda: str(plan.render()) == REFUSAL, what="the refusal again")
        await pilot.press("ctrl+q")  # nothing in flight: quits without asking
        await wait_until(pilot, lambda: not app.is_running, what="the app to exit")
    assert app.return_code == 0


def test_one_computation_at_a_time_and_waiting_ends_when_cancelled() -> None:
    slot, release, cancel = OneAtATime("test"), threading.Event(), threading.Event()
    started: list[str] = []

    def slow() -> str:
        started.append("slow")
        release.wait(30)
        return "slow"

    waiter = threading.Thread(target=lambda: started.append(str(slot.run(slow, cancel.is_set))))
    waiter.start()
    deadline = time.monotonic() + 10
    while "slow" not in started and time.monotonic() < deadline:
        time.sleep(0.01)
    cancel.set()  # superseded: the waiter returns None while the computation goes on
    waiter.join(5)
    assert not waiter.is_alive() and started == ["slow", "None"]
    # the next one starts once the one left behind ended; its result comes back, its error is raised here
    release.set()
    assert slot.run(lambda: "next", lambda: False) == "next"
    with pytest.raises(GaptuiError, match="bad"):
        slot.run(lambda: (_ for _ in ()).throw(GaptuiError("bad")), lambda: False)


@pytest.mark.asyncio
async def test_ctrl_q_does_not_wait_for_an_estimate_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entered, release = threading.Event(), threading.Event()
    computing: list[threading.Thread] = []
    plan = gaptui.launch.plan

    def slow_plan(*args: Any, **kwargs: Any) -> Any:  # a grid that takes minutes to plan
        computing.append(threading.current_thread())
        entered.set()
        release.wait(60)
        return plan(*args, **kwargs)

    monkeypatch.setattr(gaptui.launch, "plan", slow_plan)
    app = GaptuiApp(Workspace(tmp_path / "ws"))
    try:
        async with app.run_test(size=SIZE) as pilot:
            form = app.screen
            assert isinstance(form, NewExperimentScreen)
            await wait_until(pilot, lambda: form.query_one("#models", SelectionList).option_count > 0, what="models")
            form.query_one("#models", SelectionList).select("gcn")
            await wait_until(pilot, entered.is_set, what="the summary to be computing")
            await pilot.press("ctrl+q")
            await wait_until(pilot, lambda: not app.is_running, what="the app to exit")
        assert app.return_code == 0
        # what still computes the summary is a daemon thread: the process's exit does not wait for it
        assert all(thread.daemon for thread in computing if thread.is_alive())
    finally:
        release.set()
