"""`gaptui export --wandb PROJECT`: every finished run logged to Weights & Biases once, offline without a key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

wandb = pytest.importorskip("wandb")

from gaptui import wandb_export  # noqa: E402
from tests.support.cli import run_cli  # noqa: E402
from tests.support.records import gape_history, history_of  # noqa: E402


@pytest.fixture(autouse=True)
def _no_wandb_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """No API key anywhere: the export must go offline (and never prompt)."""
    env = {"HOME": str(tmp_path / "home"), "WANDB_API_KEY": "", "NETRC": str(tmp_path / "home" / ".netrc")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return env


def _offline_runs(folder: Path) -> list[Path]:
    return sorted((folder / "wandb").glob("offline-run-*"))


@pytest.mark.e2e
def test_each_run_is_logged_offline_once_with_its_config_history_and_cell(tmp_path: Path) -> None:
    records = gape_history(tmp_path)
    ws = history_of(tmp_path, records)
    res = run_cli("export", "--wandb", "gaptui-test", "--workspace", str(ws))
    assert res.returncode == 0, res.stderr
    folder = ws / "exports" / "wandb"
    assert "logged 18 run(s) to W&B project gaptui-test offline in" in res.stdout and "wandb sync" in res.stdout
    runs = _offline_runs(folder)
    assert len(runs) == 18
    ledger = json.loads((folder / "gaptui-wandb.json").read_text())["gaptui-test"]
    assert {r["hash"] for r in records} == set(ledger) and {e["status"] for e in ledger.values()} == {"done"}
    first = next(p for p in runs if p.name.endswith(ledger[records[0]["hash"]]["id"]))
    data = next(first.glob("*.wandb")).read_bytes()
    payload = wandb_export.run_payload(records[0])
    assert payload["group"] == "dataset=aqsol, pe=none" and payload["tags"] == ["dataset=aqsol", "pe=none"]
    for needle in (payload["group"], "val_mae", "train_loss", records[0]["hash"], "gaptui_status"):
        assert needle.encode() in data, needle
    assert [epoch for epoch, _ in payload["history"]] == [1, 2, 3, 4]
    assert payload["summary"]["val_mae"] == pytest.approx(records[0]["metrics"]["val_mae"])

    again = run_cli("export", "--wandb", "gaptui-test", "--workspace", str(ws))
    assert again.returncode == 0 and "logged 0 run(s)" in again.stdout and "18 already there" in again.stdout
    assert len(_offline_runs(folder)) == 18


@pytest.mark.e2e  # the export is killed in a subprocess
def test_a_run_killed_half_way_is_set_aside_and_logged_again_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = gape_history(tmp_path)[:4]
    folder = tmp_path / "wb"
    real = wandb_export._log_run
    calls = {"n": 0}

    def killed_on_the_third(wb, payload, wandb_id, *args):
        calls["n"] += 1
        if calls["n"] == 3:
            run = wb.init(project="p", id=wandb_id, dir=str(folder), mode="offline", settings=wb.Settings(silent=True))
            run.log({"train_loss": 1.0}, step=1)
            run.finish()
            raise KeyboardInterrupt  # the export dies between opening the run and marking it done
        return real(wb, payload, wandb_id, *args)

    monkeypatch.setattr(wandb_export, "_log_run", killed_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        wandb_export.export_wandb(records, "p", folder=folder)
    ledger = json.loads((folder / "gaptui-wandb.json").read_text())["p"]
    assert sorted(e["status"] for e in ledger.values()) == ["done", "done", "started"]
    monkeypatch.setattr(wandb_export, "_log_run", real)
    summary = wandb_export.export_wandb(records, "p", folder=folder)
    assert summary.offline and len(summary.skipped) == 2 and len(summary.logged) == 2
    ledger = json.loads((folder / "gaptui-wandb.json").read_text())["p"]
    redone = ledger[records[2]["hash"]]
    assert redone["status"] == "done" and redone["attempt"] == 2 and redone["id"].endswith("-2")
    names = [p.name for p in _offline_runs(folder)]
    assert len(names) == 4 and not any(n.endswith(f"-{records[2]['id']}-1") for n in names)
    assert [p.name.rpartition("-run-")[2][16:] for p in (folder / "incomplete").iterdir()] == [f"{records[2]['id']}-1"]


class FakeRemote:
    def __init__(self, run_hash: str, done: bool) -> None:
        self.config = {"gaptui": {"hash": run_hash}}
        self.summary = {"gaptui_status": "done"} if done else {}
        self.deleted = False

    def delete(self) -> None:
        self.deleted = True


def test_online_runs_already_there_are_skipped_and_half_logged_ones_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = gape_history(tmp_path)[:3]
    complete, partial = FakeRemote(records[0]["hash"], True), FakeRemote(records[1]["hash"], False)
    asked: list[str] = []

    class FakeApi:
        def __init__(self, timeout=None) -> None:
            pass

        def runs(self, path):
            asked.append(path)
            return [complete, partial]

    opened: list[dict] = []
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(wandb, "Api", FakeApi)
    monkeypatch.setattr(
        wandb_export, "_log_run", lambda wb, payload, wandb_id, *a: opened.append({"id": wandb_id, **payload})
    )
    summary = wandb_export.export_wandb(records, "proj", entity="lab", folder=tmp_path / "wb")
    assert asked == ["lab/proj"] and not summary.offline
    assert summary.skipped == [records[0]["id"]] and summary.logged == [records[1]["id"], records[2]["id"]]
    assert partial.deleted and not complete.deleted
    assert [o["id"] for o in opened] == [f"{records[1]['id']}-1", f"{records[2]['id']}-1"]


@pytest.mark.e2e
def test_bad_use_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = history_of(tmp_path, gape_history(tmp_path)[:2])
    res = run_cli("export", "--wandb", "team/proj", "--workspace", str(ws))
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "--entity" in res.stderr
    res = run_cli("export", "--entity", "lab", "--workspace", str(ws))
    assert res.returncode == 2 and "--entity and --wandb-dir go with --wandb PROJECT" in res.stderr
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)
    with pytest.raises(wandb_export.GaptuiError, match=r"pip install 'gaptui\[wandb\]'"):
        wandb_export.export_wandb(gape_history(tmp_path)[:1], "proj", folder=tmp_path / "wb")
