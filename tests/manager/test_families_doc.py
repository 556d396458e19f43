"""The plug-in family of docs/families.md ("A complete plug-in family") works as the page says: its python block and
its toml block, taken from the page as they are, registered through GAPTUI_FAMILIES and run through `gaptui run`,
`table`, `stats`, `figures` and `report`, and its form gives back the preset it was filled from."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gaptui.history.store import read_records
from gaptui.workspace import Workspace
from tests.support import ROOT
from tests.support.cli import run_cli

#: Every test here starts the CLI or a worker in a subprocess.
pytestmark = pytest.mark.e2e

PAGE = ROOT / "docs" / "families.md"
SECTION = "## A complete plug-in family"


def _blocks() -> tuple[str, str]:
    """The section's one python block and one toml block."""
    text = PAGE.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    python = re.findall(r"```python\n(.*?)```", section, re.S)
    toml = re.findall(r"```toml\n(.*?)```", section, re.S)
    assert len(python) == 1 and len(toml) == 1, "the section holds one python block and one toml block"
    return python[0], toml[0]


@pytest.fixture
def plugin(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The page's family as ``degree_family.py`` and its preset as ``degree.toml`` in a folder of their own."""
    code, preset = _blocks()
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "degree_family.py").write_text(code)
    (folder / "degree.toml").write_text(preset)
    path = os.pathsep.join([str(folder), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {"GAPTUI_FAMILIES": "degree_family", "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    return folder, env


def test_the_pages_plug_in_family_runs_through_run_table_stats_figures_and_report(
    tmp_path: Path, plugin: tuple[Path, dict[str, str]]
) -> None:
    folder, env = plugin
    ws = tmp_path / "ws"
    where = ("--workspace", str(ws))
    run = run_cli("run", "--preset", str(folder / "degree.toml"), *where, "--gpus", "none", "--cpu-jobs", "2", env=env)
    assert run.returncode == 0, run.stderr
    records = read_records(Workspace(ws))
    assert (
        len(records) == 8 and {r["status"] for r in records} == {"done"} and {r["task"] for r in records} == {"degree"}
    )
    assert {(r["axes"]["nodes"], r["axes"]["model"]) for r in records} == {
        (n, m) for n in (8, 16) for m in ("linear", "mlp")
    }
    for record in records:  # five epochs of the shared loop, a checkpoint, a finite metric
        assert 0 <= record["metrics"]["val_mae"] < 1
        events = [json.loads(line) for line in (Path(record["run_dir"]) / "events.jsonl").read_text().splitlines()]
        assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2, 3, 4, 5]
        assert (Path(record["run_dir"]) / "checkpoint.pt").is_file()

    # the history holds one family: every analysis command finds it without --task
    table = run_cli("table", "--format", "json", *where, env=env)
    assert table.returncode == 0, table.stderr
    (doc,) = json.loads(table.stdout)
    assert (doc["task"], doc["metric"], doc["higher_is_better"]) == ("degree", "val_mae", False)
    assert (doc["row_axis"], doc["column_axis"], doc["rows"], doc["columns"]) == (
        "model",
        "nodes",
        ["linear", "mlp"],
        [8, 16],
    )
    stats = run_cli("stats", *where, env=env)
    assert stats.returncode == 0, stats.stderr
    assert "linear" in stats.stdout and "mlp" in stats.stdout
    figures = run_cli("figures", "--out", str(tmp_path / "figures"), *where, env=env)
    assert figures.returncode == 0, figures.stderr
    drawn = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert drawn and all(name.startswith("degree") for name in drawn), drawn
    report = run_cli("report", "--out", str(tmp_path / "report"), *where, env=env)
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    assert "degree" in text and "val MAE" in text and (tmp_path / "report" / "report.html").is_file()

    # run again: nothing to do (the grid resumes, it never repeats a finished run)
    again = run_cli("run", "--preset", str(folder / "degree.toml"), *where, "--gpus", "none", env=env)
    assert again.returncode == 0, again.stderr
    assert len(read_records(Workspace(ws))) == 8


def test_the_pages_plug_in_form_gives_back_its_preset(plugin: tuple[Path, dict[str, str]]) -> None:
    folder, env = plugin
    code = (
        "import tomllib\n"
        "from engine.tasks import family\n"
        "fam = family('degree')\n"
        "raw = tomllib.loads(open('degree.toml').read())\n"
        "body = {k: v for k, v in raw.items() if k not in ('task', 'description')}\n"
        "assert fam.form.preset_from_form(fam.form.form_values(body)) == body\n"
        "assert fam.parse_preset(raw, 'degree.toml').sizes == (8, 16)\n"
        "print(len(fam.grid(fam.parse_preset(raw, 'degree.toml'), None)))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=folder, env={**os.environ, **env}, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["8"]
