"""The report's Tuning part reads well: the best row counts only trials with every seed done, sampled values are
rounded in one way everywhere, and Optuna's parallel-coordinate and importance figures are drawn (or it says why
not)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

optuna = pytest.importorskip("optuna")
pytest.importorskip("matplotlib")

from engine.typed import short_value  # noqa: E402
from gaptui import report  # noqa: E402
from gaptui.tune.results import trial_value  # noqa: E402
from gaptui.tune.search import params_text  # noqa: E402
from gaptui.tune.studies import storage  # noqa: E402
from gaptui.workspace import Workspace  # noqa: E402

LR = 0.0010197722346506274


def _trial_run(n: int, row: str, trial: int, seed: int, value: float | None, params: dict[str, Any]) -> dict:
    return {
        "id": f"{n:012x}",
        "hash": f"{n:064x}",
        "status": "done" if value is not None else "running",
        "task": "alignment",
        "axes": {"dataset": "er", "noise": 0.2, "model": row, "recipe": "gaptui"},
        "seed": seed,
        "metrics": {} if value is None else {"val_lap_acc": value},
        "tags": ["study=study"],
        "tune": {"study": "study", "row": row, "trials": [trial], "of": 3, "metric": "val_lap_acc",
                 "seeds": [0, 1], "params": params, "space": ["lr log [0.0001, 0.01]", "layers in [2, 3]"]},
    }  # fmt: skip


def _study(ws: Workspace, row: str, trials: list[tuple[dict[str, Any], float]]) -> None:
    store = storage(ws, "study")
    study = optuna.create_study(study_name=f"study:{row}", storage=store, direction="maximize")
    distributions = {
        "lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
        "layers": optuna.distributions.CategoricalDistribution([2, 3]),
    }
    for params, value in trials:
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value))


def test_sampled_values_are_rounded_one_way() -> None:
    assert short_value(LR) == "1.02e-3" and short_value(0.002) == "0.002" and short_value(0.15338590212) == "0.153"
    assert short_value(4) == "4" and short_value("sum") == "sum" and short_value(True) == "True"
    assert params_text({"lr": LR, "layers": 3}) == "layers 3, lr 1.02e-3"


def test_a_trial_counts_once_every_seed_it_trains_is_done() -> None:
    both = [_trial_run(1, "gcn", 0, 0, 0.4, {}), _trial_run(2, "gcn", 0, 1, 0.6, {})]
    assert trial_value(both, "val_lap_acc") == pytest.approx(0.5)
    assert trial_value(both[:1], "val_lap_acc") is None  # seed 1 not recorded yet
    assert trial_value([both[0], _trial_run(3, "gcn", 0, 1, None, {})], "val_lap_acc") is None  # seed 1 running
    legacy = [{k: v for k, v in both[0].items()}]
    legacy[0]["tune"] = {k: v for k, v in both[0]["tune"].items() if k != "seeds"}  # tagged before seeds were
    assert trial_value(legacy, "val_lap_acc") == pytest.approx(0.4)


def test_the_tuning_part_has_rounded_best_values_and_optunas_figures(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws")
    good, high = {"lr": LR, "layers": 3}, {"lr": 0.0042, "layers": 2}
    records = [
        _trial_run(1, "gcn", 0, 0, 0.4, good),
        _trial_run(2, "gcn", 0, 1, 0.6, good),
        _trial_run(3, "gcn", 1, 0, 0.9, high),  # its seed 1 is not done: not the best, however high
        _trial_run(4, "gcn", 2, 0, 0.2, {"lr": 0.0003, "layers": 2}),
        _trial_run(5, "gcn", 2, 1, 0.3, {"lr": 0.0003, "layers": 2}),
        _trial_run(6, "gin", 0, 0, 0.7, good),
        _trial_run(7, "gin", 0, 1, 0.7, good),
    ]
    records[2]["tune"]["trials"] = [1]
    _study(ws, "gcn", [(good, 0.5), ({"lr": 0.0003, "layers": 2}, 0.25)])
    _study(ws, "gin", [(good, 0.7)])
    out = tmp_path / "report"
    report.write_report(records, out, ws)
    text = (out / "report.md").read_text()
    assert (
        "| study | gcn | 3/3 | 0 | 0 | lr log [0.0001, 0.01]; layers in [2, 3] | layers 3, lr 1.02e-3 | 0.5000 |"
        in text
    )
    assert "- study / gcn: 1 trial(s) left out of the best, a seed not done." in text
    assert "| study | gin | 1/3 | 0 | 0 |" in text and "0.0010197722346506274" not in text
    for name in ("alignment-tuning-study-gcn-parallel.png", "alignment-tuning-study-gcn-importance.png",
                 "alignment-tuning-study-gin-parallel.png"):  # fmt: skip
        assert f"](figures/{name})" in text and (out / "figures" / name).read_bytes()[:4] == b"\x89PNG"
    assert "study / gin: parameter importance needs at least 2 completed trials (1 so far)" in text
    assert not (out / "figures" / "alignment-tuning-study-gin-importance.png").exists()


def test_a_tuning_part_without_its_study_file_says_so(tmp_path: Path) -> None:
    ws = Workspace.resolve(tmp_path / "ws")
    records = [_trial_run(1, "gcn", 0, 0, 0.4, {"lr": LR}), _trial_run(2, "gcn", 0, 1, 0.5, {"lr": LR})]
    out = tmp_path / "report"
    report.write_report(records, out, ws)
    text = (out / "report.md").read_text()
    assert "- study / gcn: no study file" in text and "lr 1.02e-3" in text
