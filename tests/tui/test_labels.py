"""Labels come from what the families declare: each run's curves are titled with its family's metric (a property
run is not plotted under an alignment label), the New-experiment form titles each column once, and the
``property_class`` axis is recorded (records filed before it read it from their spec)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from engine.tasks import family
from gaptui.columns import describe
from gaptui.history.store import History, read_records
from gaptui.plots import curves_of, curves_plot, epoch_rows
from gaptui.tui.app import GaptuiApp
from gaptui.tui.screens.new_experiment import NewExperimentScreen
from gaptui.workspace import Workspace
from tests.support.tui import SIZE, switch_task


def _events(per_epoch: dict[str, float], evals: dict[str, float], epochs: int = 3) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"event": "start", "epochs": epochs}]
    for epoch in range(1, epochs + 1):
        out.append({"event": "eval", "epoch": epoch, **{k: v / epoch for k, v in evals.items()}})
        out.append({"event": "epoch", "epoch": epoch, "train_loss": 1.0 / epoch, **per_epoch})
    return out


def test_each_familys_curve_is_titled_with_its_own_metric() -> None:
    alignment = _events({"val_acc": 0.5}, {"val_lap_acc": 0.5})
    gape = _events({"val_mae": 0.9}, {"val_mae": 0.9, "test_mae": 1.0})
    # A property run: train accuracy per epoch, its U score once, in an evaluation after training.
    properties = [*_events({"train_acc": 0.8}, {}), {"event": "eval", "epoch": 3, "u_score": 0.7}]
    assert curves_of("alignment", {"a": epoch_rows(alignment)})[1] == ("val_lap_acc", "LAP acc")
    assert curves_of("gape", {"g": epoch_rows(gape)})[1] == ("val_mae", "val MAE")
    assert curves_of("properties", {"p": epoch_rows(properties)})[1] == ("train_acc", "train accuracy")
    shown = curves_plot({"p": properties}, "properties", width=100, height=12)
    assert "train accuracy" in shown and "LAP" not in shown


def test_a_curves_plot_draws_only_its_own_runs_after_another_in_the_same_process() -> None:
    properties = [*_events({"train_acc": 0.8}, {}), {"event": "eval", "epoch": 3, "u_score": 0.7}]
    curves_plot({"earlier-run": properties}, "properties", width=100, height=12)
    runs = {name: _events({}, {"val_lap_acc": 0.4}, epochs=4) for name in ("first-run", "second-run")}
    shown = curves_plot(runs, "alignment", width=120, height=18)  # raised IndexError in plotext's legend once
    assert "first-run" in shown and "second-run" in shown and "earlier-run" not in shown


@pytest.mark.asyncio
async def test_two_form_columns_never_share_a_title(tmp_path: Path) -> None:
    app = GaptuiApp(Workspace(tmp_path / "ws"))
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        assert isinstance(form, NewExperimentScreen)
        await switch_task(pilot, form, "properties", "strategies")
        shown = [str(s.render()) for s in form.query(".choices Static.section-title").results(Static)]
        await pilot.press("ctrl+q")
    assert shown == ["Properties", "Poolings", "Dimensions", "Strategies"]


def test_the_property_class_is_recorded_and_read_from_old_records(tmp_path: Path) -> None:
    from engine.properties.spec import PropertySpec

    fam = family("properties")
    spec = PropertySpec(property="surjective", pooling="mean", dimension="sensitivity")
    assert fam.record_axes(spec)["property_class"] == "function"
    ws = Workspace.resolve(tmp_path / "ws")
    old = {
        "id": "0" * 12,
        "hash": "0" * 64,
        "status": "done",
        "task": "properties",
        "spec": spec.to_dict(),
        "axes": {"dimension": "sensitivity", "pooling": "mean", "property": "surjective"},  # filed before
        "seed": 0,
        "metrics": {"u_score": 0.5},
    }
    with History(ws, write=True) as history:
        history.put_many([old])
    record = read_records(ws)[0]
    assert record["axes"]["property_class"] == "function"
    assert describe(record) == "sensitivity mean surjective"  # derived: in its own column, not in the run's line
