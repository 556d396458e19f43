"""The one launch service: `gaptui run` and the terminal app's launch plan the same runs and refuse the same plans
in the same words, for a plug-in family too (the toy family of ``tests/support/toy_family.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import GaptuiError
from gaptui.history.store import History, read_records
from gaptui.scheduler import Scheduler, Slot
from gaptui.workspace import Workspace
from tests.support.cli import run_cli
from tests.support.presets import toy_preset

ENV = {"GAPTUI_FAMILIES": "tests.support.toy_family", "OMP_NUM_THREADS": "1"}
CPU = ("--gpus", "none", "--cpu-jobs", "1")


def _app_launch(ws: Workspace, preset_path: Path, **slots) -> tuple[list[str], list[tuple[str, str]]]:
    """Launch ``preset_path`` the way the app does (its manager loop's Launch command, on a scheduler that is never
    stepped): the hashes it queued, in order, and the notices it posted."""
    from gaptui.presets import load_preset
    from gaptui.tui import manager
    from gaptui.tui.messages import ManagerNotice
    from gaptui.tui.planning import SlotConfig

    posted: list = []
    with History(ws, write=True) as history:
        loop = manager.ManagerLoop(ws, history, posted.append)
        loop.scheduler = Scheduler(ws, history, [Slot("cpu#0", {})])
        loop._execute(manager.Launch(load_preset(str(preset_path), ws), SlotConfig(**slots)))
        queued = [s.hash() for s in loop.scheduler.queue]
    return queued, [(m.text, m.severity) for m in posted if isinstance(m, ManagerNotice)]


@pytest.mark.e2e
def test_the_cli_and_the_app_plan_the_same_runs_in_the_same_order(tmp_path: Path, toy: None) -> None:
    preset = toy_preset(tmp_path, sizes=[2, 3], steps=1)
    ws = tmp_path / "ws"
    dry = run_cli("run", "--preset", str(preset), "--dry-run", "--list", "-w", str(ws), *CPU, env=ENV)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    order = [line.split()[1] for line in lines if line.strip()[:1].isdigit()]
    assert len(order) == 10
    # the summary: runs per family and table axis, the dependency chains, the memory peak of the toy data
    assert "  toy: 10 run(s) to start; model: pre 2, mean 4, median 4; size: 2 5, 3 5" in lines
    assert "dependencies: 8 run(s) wait for 2 other run(s); longest chain 2 runs" in lines
    assert any(line.startswith("memory peak of toy data: toy data n=3: peak about 3.0 MB") for line in lines)
    # a family without a cost model and no finished run: no number, said why
    assert "estimate: none of the 10 run(s) left has one yet" in lines
    assert "not estimated: 4 run(s): mean: no finished run of this cell on this machine yet" in dry.stdout
    short = run_cli("run", "--preset", str(preset), "--dry-run", "--no-estimate", "-w", str(ws), *CPU, env=ENV)
    assert short.returncode == 0 and not any(line.strip()[:1].isdigit() for line in short.stdout.splitlines())

    queued, notices = _app_launch(Workspace(ws), preset, gpus=[], cpu_jobs=1)
    assert [h[:12] for h in queued] == order
    assert notices[-1] == ("toy: 10 runs, 0 already done, 10 queued on 1 slot(s)", "information")


@pytest.mark.e2e
def test_a_plan_that_cannot_fit_is_refused_in_one_line_by_the_cli_and_the_app(tmp_path: Path, toy: None) -> None:
    preset = toy_preset(tmp_path, sizes=[2, 10**9], steps=1)
    ws = tmp_path / "ws"
    res = run_cli("run", "--preset", str(preset), "--dry-run", "-w", str(ws), *CPU, env=ENV)
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("error: toy data n=1000000000 needs about 953.7 TB of memory (1,000,000,000 values")
    assert line.endswith("; lower the sizes")
    run = run_cli("run", "--preset", str(preset), "-w", str(ws), *CPU, env=ENV)
    assert run.returncode == 2 and run.stderr.strip() == line

    queued, notices = _app_launch(Workspace(ws), preset, gpus=[], cpu_jobs=1)
    assert queued == [] and notices == [(line.removeprefix("error: "), "error")]
    assert read_records(Workspace(ws)) == []  # refused before any record was written


@pytest.mark.e2e
def test_a_bad_option_is_refused_in_the_same_words_by_the_cli_and_the_app(tmp_path: Path, toy: None) -> None:
    preset = toy_preset(tmp_path, sizes=[2], steps=1)
    ws = tmp_path / "ws"
    res = run_cli("run", "--preset", str(preset), "--backend", "cloud", "-w", str(ws), *CPU, env=ENV)
    assert res.returncode == 2
    assert res.stderr.strip() == "error: --backend 'cloud': expected local or slurm"
    queued, notices = _app_launch(Workspace(ws), preset, gpus=[], cpu_jobs=1, backend="cloud")
    assert queued == [] and notices == [("--backend 'cloud': expected local or slurm", "error")]


@pytest.mark.e2e
@pytest.mark.slow  # 16 s of worker processes; run with -m slow
def test_train_runs_one_run_of_a_plug_in_family_from_a_preset(tmp_path: Path, toy: None) -> None:
    preset = toy_preset(tmp_path, sizes=[2], steps=1)
    ws = tmp_path / "ws"
    where = ("--task", "toy", "--preset", str(preset), "-w", str(ws), "--json")
    waiting = run_cli("train", *where, "-W", "model=mean", "-W", "seed=1", env=ENV)
    assert waiting.returncode == 2
    assert "needs run" in waiting.stderr and "done first" in waiting.stderr  # its pre run is not done yet
    pre = run_cli("train", *where, "-W", "model=pre", env=ENV)
    assert pre.returncode == 0, pre.stderr
    mean = run_cli("train", *where, "-W", "model=mean", "-W", "seed=1", "--set", "steps=4", env=ENV)
    assert mean.returncode == 0, mean.stderr
    assert json.loads(mean.stdout)["val_mae"] == pytest.approx(0.7 + 0.2 + 0.5 + 0.01)
    records = {r["axes"]["model"]: r for r in read_records(Workspace(ws))}
    assert records["mean"]["status"] == "done" and records["mean"]["spec"]["steps"] == 4
    ambiguous = run_cli("train", *where, "-W", "model=mean", env=ENV)
    assert ambiguous.returncode == 2
    assert "2 runs of its grid match; choose one with --where (size: 2; model: mean; seed: 0, 1)" in ambiguous.stderr


def test_a_user_dataset_too_large_for_memory_is_refused_once_built_before_any_run_is_queued(tmp_path: Path) -> None:
    """A folder of edge lists says nothing of its size before it is built: the plan passes, the launch builds the
    dataset, then refuses its runs in one line before queueing any (the CLI and the app through the same start)."""
    from gaptui import launch
    from gaptui.presets import load_preset

    graphs = tmp_path / "graphs"
    graphs.mkdir()
    nodes = 60_000  # a training batch of 20 such pairs: about 1 TB of similarities
    for i in range(3):
        (graphs / f"g{i}.txt").write_text("".join(f"{v} {v + 1}\n" for v in range(nodes - 1)))
    preset = tmp_path / "big.toml"
    preset.write_text(
        'noise = [0.1]\nmodels = ["gcn"]\nseeds = [0]\nlaplacian = false\n'
        "[run]\nepochs = 1\nbatch_size = 20\nbudget = 5000\nout_dim = 16\n"
        f'[[datasets]]\nbase = "folder"\nparams = {{ path = "{graphs}" }}\ntrain = 2\nval = 1\n'
    )
    ws = Workspace(tmp_path / "ws")
    loaded = load_preset(str(preset), ws)
    settings = launch.launch_settings(loaded, launch.LaunchOptions(gpus=[], cpu_jobs=1), ws)
    launch_plan = launch.plan_launch(loaded, ws, [], settings)
    assert launch_plan.memory == [] and len(launch_plan.plan.to_run) == 1  # unknown until built
    with History(ws, write=True) as history:
        scheduler = launch.make_backend(settings, ws, history)
        with pytest.raises(GaptuiError) as refused:
            launch.start(launch_plan, scheduler)
        assert list(scheduler.queue) == [] and history.records() == []
    message = str(refused.value)
    assert message.startswith("gcn on folder") and "needs about" in message and "but this machine has" in message
    assert message.endswith("lower --batch-size or the graph order")


def test_train_chooses_among_the_runs_of_a_grid_that_mixes_families(tmp_path: Path) -> None:
    """A GAPE grid holds its alignment pretraining run too: --task picks the family, the preset's by default."""
    from gaptui.cli.train import _chosen_spec

    ws = Workspace(tmp_path / "ws")
    rwpe = _chosen_spec(ws, "gape", "gape-smoke", ["pe=rwpe"], None, [])
    assert (rwpe.task, rwpe.pe) == ("gape", "rwpe")
    assert _chosen_spec(ws, None, "gape-smoke", ["pe=none"], None, []).task == "gape"
    assert _chosen_spec(ws, "alignment", "gape-smoke", [], None, []).task == "alignment"  # its one pretraining run
    with pytest.raises(GaptuiError, match="has no run of task properties"):
        _chosen_spec(ws, "properties", "gape-smoke", [], None, [])
