"""`gaptui report`: one Markdown file and the same as self-contained HTML for every family of the history, with
links that resolve, updated in place on a grown history, and never replacing a file it did not write."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.cli import run_cli  # noqa: E402
from tests.support.records import alignment_history, gape_history, properties_history  # noqa: E402

pytest.importorskip("matplotlib")
pytest.importorskip("markdown")


def history_of(tmp_path: Path, records: list) -> Path:
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    ws = Workspace.resolve(tmp_path / "ws")
    ws.root.mkdir(parents=True, exist_ok=True)
    with History(ws, write=True) as history:
        history.put_many(records)
    return ws.root


def test_report_of_every_family(tmp_path: Path) -> None:
    from gaptui import report

    records = alignment_history(tmp_path) + gape_history(tmp_path) + properties_history()
    out = tmp_path / "out"
    written = report.write_report(records, out)
    text = (out / "report.md").read_text()
    for task in ("alignment", "gape", "properties"):
        assert f"\n# {task}: " in text
    assert text.count("## Statistics") == 3 and "Compared with reference `paper`" in text
    assert "Friedman: chi2" in text and "Kendall W over 3 seeds" in text
    # the GAPE MAE is lower-is-better: the lowest MAE ranks first
    assert "average rank over 2 cells (1 = best): gape 1.00, rwpe 2.00, none 3.00" in text
    assert "- seeds: 0, 1, 2" in text and "gaptui code of this report: " in text
    links = re.findall(r"\]\((figures/[^)]+)\)", text)
    assert "Pooling advice: mean R score per property class" in text  # the properties part, after Table 2
    # 14: the properties part draws the pooling-advice bars beside Table 2's
    assert len(links) == 14 and all((out / link).is_file() for link in links)
    assert {p.relative_to(out).as_posix() for p in written} == {"report.md", "report.html", *links}
    html = (out / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == 14 and "figures/" not in html  # self-contained
    assert html.count("<table>") >= 6


@pytest.mark.e2e
def test_report_updates_in_place_and_keeps_foreign_files(tmp_path: Path) -> None:
    from gaptui import report

    out = tmp_path / "out"
    gape = gape_history(tmp_path)
    report.write_report(gape, out)
    assert "# alignment" not in (out / "report.md").read_text()
    # The history grows: the report is updated in place.
    report.write_report(gape + alignment_history(tmp_path), out)
    assert "# alignment" in (out / "report.md").read_text() and (out / "figures" / "alignment-cd.png").is_file()
    # A file the report did not write is never replaced without --force, and nothing else changes (the CLI).
    ws = history_of(tmp_path, gape)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    res = run_cli("report", "--out", str(mine), "--workspace", str(ws))
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"error: {mine / 'report.md'} exists and was not written by gaptui report; "
        "choose another --out folder or pass --force to replace it"
    ]
    assert sorted(p.name for p in mine.iterdir()) == ["report.md"] and (mine / "report.md").read_text() == "my notes"
    res = run_cli("report", "--out", str(mine), "--force", "--workspace", str(ws))
    assert res.returncode == 0 and (mine / "report.md").read_text().startswith("# gaptui report")
    assert f"wrote {mine / 'report.html'}" in res.stdout


@pytest.mark.e2e
def test_export_to_mlflow_logs_every_finished_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    from gaptui import mlflow_export

    records = gape_history(tmp_path)
    (Path(records[0]["run_dir"]) / "result.json").write_text('{"status": "done"}')
    ws = history_of(tmp_path, records)
    store = f"file:{tmp_path / 'mlruns'}"
    res = run_cli("export", "--mlflow", store, "--workspace", str(ws))
    assert res.returncode == 0, res.stderr
    assert f"logged 18 run(s) to {store}; 0 already there" in res.stdout
    res = run_cli("export", "--mlflow", store, "--workspace", str(ws))
    assert res.returncode == 0 and "logged 0 run(s)" in res.stdout and "18 already there" in res.stdout

    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's own reader of the local store
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("gaptui-gape")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 18
    first = next(r for r in runs if r.data.tags["gaptui.hash"] == records[0]["hash"])
    assert first.data.tags["axis.pe"] == "none" and first.data.tags["axis.dataset"] == "aqsol"
    assert first.data.metrics["final.val_mae"] == pytest.approx(records[0]["metrics"]["val_mae"])
    history = client.get_metric_history(first.info.run_id, "train_loss")
    assert [m.step for m in history] == [1, 2, 3, 4]
    assert [a.path for a in client.list_artifacts(first.info.run_id)] == ["result.json"]
    assert mlflow_export.epoch_metrics(Path(records[0]["run_dir"]))[0][0] == "train_loss"


@pytest.mark.e2e
def test_export_needs_a_destination(tmp_path: Path) -> None:
    res = run_cli("export", "--workspace", str(tmp_path / "ws"))
    assert res.returncode == 2
    assert res.stderr.strip() == (
        "error: gaptui export: give --out DIR (tables and records), --mlflow URI, --wandb PROJECT, or several"
    )
