"""The Slurm backend: options and refusals (always), and grids on a real Slurm (marked ``slurm``).

The ``slurm`` tests need a running cluster with accounting (``scripts/start-slurm.sh start``); ``.ci/run`` starts
one and runs ``python -m pytest -m slurm``. Workspaces live under pytest's /tmp folders, which the single node
shares with itself, hence ``--force``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from engine.alignment.preset import dump_preset
from engine.errors import GaptuiError
from gaptui.backends.slurm import (
    SlurmOptions,
    array_ids,
    by_array,
    elapsed_seconds,
    in_flight_on_slurm,
    parse_slurm_options,
)
from gaptui.history.store import read_records
from gaptui.presets import load_preset
from gaptui.workspace import Workspace
from tests.support.cli import run_cli, start_cli
from tests.support.presets import alignment_preset
from tests.support.records import run_events
from tests.support.tui import SIZE
from tests.support.waiting import event_starts, wait_for, wait_until


def _slurm_up() -> str | None:
    """Why the Slurm tests cannot run here, or None."""
    if shutil.which("sbatch") is None:
        return "sbatch not found: install Slurm and run scripts/start-slurm.sh start"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"scontrol ping failed ({exc})"
    if ping.returncode != 0 or "UP" not in ping.stdout:
        return "no Slurm controller answers: run scripts/start-slurm.sh start"
    return None


needs_slurm = pytest.mark.skipif(_slurm_up() is not None, reason=str(_slurm_up()))


def _preset(
    tmp_path: Path,
    models: tuple[str, ...] = ("gcn",),
    noise: tuple[float, ...] = (0.1,),
    epochs: int = 2,
    slurm: str = "",
    train: int = 20,
    batch_size: int = 10,
    name: str = "grid",
) -> Path:
    """The tiny grid with a [slurm] table (``slurm``: its lines)."""
    return alignment_preset(
        tmp_path,
        name,
        noise=noise,
        models=models,
        laplacian=None,
        description="slurm test grid",
        run={"epochs": epochs, "batch_size": batch_size},
        dataset={"train": train},
        tail="\n[slurm]\n" + textwrap.dedent(slurm) + "\n",
    )


def _records(ws: Path) -> list[dict[str, Any]]:
    try:
        return read_records(Workspace(ws))
    except Exception:  # noqa: BLE001 - not written yet
        return []


# ---------------------------------------------------------------------------------------------- no cluster needed


def test_slurm_options_merge_validate_and_round_trip(tmp_path: Path) -> None:
    base = SlurmOptions(partition="gpu", time=30, options={"constraint": "a100"})
    merged = base.merged(partition="debug", time=None, options={"exclusive": ""})
    assert merged.partition == "debug" and merged.time == 30
    assert merged.options == {"constraint": "a100", "exclusive": ""}
    assert parse_slurm_options(["constraint=a100", "--reservation=r1"]) == {"constraint": "a100", "reservation": "r1"}
    with pytest.raises(GaptuiError, match="expected key=value"):
        parse_slurm_options(["constraint"])
    with pytest.raises(GaptuiError, match="chunk = 5000"):
        SlurmOptions(chunk=5000).check("x")
    # whole arrays are cancelled by their own id, partial ones task by task
    ids = ["7_0", "7_1", "8_0"]
    assert array_ids(["7_0", "7_1"], by_array(ids)) == ["7"]
    assert array_ids(["7_1"], by_array(ids)) == ["7_1"]
    # runs submitted and not filed are Slurm's: a local manager never starts them a second time
    records = [
        {"hash": "a", "status": "running", "backend": "slurm", "slurm": {"job_id": "7_0"}},
        {"hash": "b", "status": "done", "backend": "slurm", "slurm": {"job_id": "7_1"}},
        {"hash": "c", "status": "queued", "backend": "slurm", "slurm": {}},
        {"hash": "d", "status": "running"},
    ]
    assert in_flight_on_slurm(records) == {"a"}
    assert elapsed_seconds("00:01:11") == 71 and elapsed_seconds("1-02:00:00") == 93600 and elapsed_seconds("") is None
    with pytest.raises(GaptuiError, match="time = 1 min leaves no room"):
        SlurmOptions(time=1).check("x")
    # a preset's [slurm] table is read, validated and written back
    path = _preset(tmp_path, slurm='partition = "gpu"\ntime = 45\noptions = { constraint = "a100" }')
    preset = load_preset(str(path))
    assert preset.slurm.partition == "gpu" and preset.slurm.time == 45 and preset.slurm.options["constraint"] == "a100"
    again = tmp_path / "again.toml"
    again.write_text(dump_preset(preset))
    assert load_preset(str(again)).slurm == preset.slurm
    bad = _preset(tmp_path, slurm="partitoin = 'gpu'", name="bad")
    with pytest.raises(GaptuiError, match=r"\[slurm\]: unknown key 'partitoin'.*did you mean 'partition'"):
        load_preset(str(bad))


@pytest.mark.e2e
def test_run_refuses_a_tmp_workspace_and_bad_slurm_input(tmp_path: Path) -> None:
    preset = _preset(tmp_path)
    under_tmp = Path("/tmp") / f"gaptui-{os.getpid()}-refused" / "ws"  # pytest's own folders may live elsewhere
    res = run_cli("run", "--preset", str(preset), "--workspace", str(under_tmp), "--backend", "slurm")
    assert res.returncode == 2 and res.stderr.startswith("error: workspace") and "--force" in res.stderr
    assert not under_tmp.exists()
    res = run_cli("run", "--preset", str(preset), "--workspace", str(tmp_path / "ws"), "--backend", "pbs")
    assert res.returncode == 2 and "--backend 'pbs': expected local or slurm" in res.stderr
    res = run_cli("run", "--preset", str(preset), "--workspace", str(tmp_path / "ws"), "--detach")
    assert res.returncode == 2 and "--detach needs --backend slurm" in res.stderr


# ---------------------------------------------------------------------------------------------- on a real Slurm


def _slurm_run(preset: Path, ws: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "run", "--preset", str(preset), "--workspace", str(ws), "--backend", "slurm", "--force", *extra, timeout=timeout
    )


@pytest.mark.e2e
@pytest.mark.slurm
@needs_slurm
def test_smoke_on_slurm_matches_a_local_run(tmp_path: Path) -> None:
    local, remote = tmp_path / "local", tmp_path / "slurm"
    res = run_cli("run", "--preset", "smoke", "--workspace", str(local), "--cpu-jobs", "2")
    assert res.returncode == 0, res.stderr
    res = _slurm_run(Path("smoke"), remote)
    assert res.returncode == 0, res.stderr
    mine = {r["id"]: r for r in read_records(Workspace(local))}
    theirs = {r["id"]: r for r in read_records(Workspace(remote))}
    assert mine.keys() == theirs.keys() and len(mine) == 4
    for run, record in theirs.items():
        assert record["status"] == mine[run]["status"] == "done"
        assert record["backend"] == "slurm" and record["slurm"]["state"] == "COMPLETED"
        assert record["slurm"]["jobs"] == [record["slurm"]["job_id"]] and record["attempts"] == 1
        assert record["metrics"].keys() == mine[run]["metrics"].keys()
        for key, value in record["metrics"].items():
            assert value == pytest.approx(mine[run]["metrics"][key], rel=1e-4, abs=1e-5), (run, key)
    tables = [json.loads(run_cli("table", "--format", "json", "-w", str(ws)).stdout) for ws in (local, remote)]
    assert len(tables[0]) == len(tables[1]) == 1
    cells = [{(c["model"], c["noise"]): c for c in t[0]["cells"]} for t in tables]
    assert cells[0].keys() == cells[1].keys()
    for key, cell in cells[1].items():
        assert cell["runs"] == cells[0][key]["runs"]
        assert cell["median"] == pytest.approx(cells[0][key]["median"], rel=1e-4, abs=1e-5)


@pytest.mark.e2e
@pytest.mark.slurm
@needs_slurm
def test_detach_then_sigkilled_manager_reattaches_each_cell_once(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    preset = _preset(tmp_path, models=("gcn", "gin", "sage"), epochs=3)
    res = _slurm_run(preset, ws, "--detach", "--array-parallelism", "1")
    assert res.returncode == 0 and "detached: 3 run(s)" in res.stderr, res.stderr
    records = _records(ws)
    assert len(records) == 3 and all(r["slurm"]["job_id"] and r["status"] == "queued" for r in records)
    status = run_cli("slurm", "status", "--json", "-w", str(ws))
    assert status.returncode == 0, status.stderr
    assert {row["id"] for row in json.loads(status.stdout)} <= {r["id"] for r in records}

    proc = start_cli("run", "--preset", str(preset), "--workspace", str(ws), "--backend", "slurm", "--force")
    wait_for(lambda: sum(r["status"] == "done" for r in _records(ws)) >= 1, timeout=300)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert sum(r["status"] == "done" for r in _records(ws)) < 3

    res = _slurm_run(preset, ws)
    assert res.returncode == 0, res.stderr
    assert "re-attached" in res.stderr
    records = _records(ws)
    assert len(records) == 3 and {r["status"] for r in records} == {"done"}
    for record in records:
        assert event_starts(record["run_dir"]) == 1  # nothing submitted twice
        assert len(record["slurm"]["jobs"]) == 1


@pytest.mark.e2e
@pytest.mark.slurm
@needs_slurm
def test_scancel_records_cancelled_and_a_rerun_resumes(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    preset = _preset(tmp_path, models=("tests.support.worker_models:SleepyModel",), epochs=6, train=20, batch_size=2)
    res = _slurm_run(preset, ws, "--detach")
    assert res.returncode == 0, res.stderr
    (record,) = _records(ws)
    wait_for(lambda: any(e["event"] == "epoch" for e in run_events(record)), timeout=300)
    res = run_cli("cancel", record["id"], "-w", str(ws))
    assert res.returncode == 0 and f"cancelled 1 run(s): {record['id']}" in res.stdout, res.stdout + res.stderr
    (record,) = _records(ws)
    assert record["status"] == "cancelled" and record["slurm"]["state"] == "CANCELLED"
    assert any(e["event"] == "cancelled" for e in run_events(record))  # the worker saved its checkpoint

    res = _slurm_run(preset, ws)
    assert res.returncode == 0, res.stderr
    (record,) = _records(ws)
    assert record["status"] == "done" and len(record["slurm"]["jobs"]) == 2
    starts = [e for e in run_events(record) if e["event"] == "start"]
    assert len(starts) == 2 and starts[1]["resumed_from"] is not None


@pytest.mark.e2e
@pytest.mark.slurm
@needs_slurm
def test_time_limit_resubmits_and_resumes_from_the_checkpoint(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    # About 60 s of training (0.25 s per batch). Once the first job has trained an epoch, its limit drops from 10 to
    # 2 minutes: Slurm then sends the warning (SIGUSR2, signal_delay 90 s before the limit) at its next timer tick,
    # the run saves its checkpoint and stops, and the manager submits it again, with the preset's 10 minutes.
    preset = _preset(
        tmp_path,
        models=("tests.support.worker_models:SleepyModel",),
        epochs=24,
        train=20,
        batch_size=2,
        slurm="time = 10\nmax_retries = 1",
    )
    proc = start_cli("run", "--preset", str(preset), "--workspace", str(ws), "--backend", "slurm", "--force")
    wait_for(lambda: any(e["event"] == "epoch" for r in _records(ws) for e in run_events(r)), timeout=300)
    (record,) = _records(ws)
    first_job = record["slurm"]["job_id"]
    subprocess.run(["scontrol", "update", f"JobId={first_job}", "TimeLimit=-8"], check=True, timeout=30)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    (record,) = _records(ws)
    assert record["status"] == "done", record
    assert record["slurm"]["retries"] == 1 and record["slurm"]["jobs"][0] == first_job
    assert len(record["slurm"]["jobs"]) == 2 and record["attempts"] == 2
    events = run_events(record)
    starts = [e for e in events if e["event"] == "start"]
    assert len(starts) == 2 and starts[1]["resumed_from"]["epoch"] >= 1
    assert [e["event"] for e in events].count("cancelled") == 1  # the checkpoint saved at the warning
    assert sorted({e["epoch"] for e in events if e["event"] == "epoch"}) == list(range(1, 25))


@pytest.mark.e2e
@pytest.mark.slurm
@needs_slurm
def test_hard_exits_are_failed_with_their_log_tail(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    preset = _preset(
        tmp_path, models=("tests.support.worker_models:HardExitModel", "tests.support.worker_models:KillParentModel")
    )
    res = _slurm_run(preset, ws)
    assert res.returncode == 1 and "2 run(s) failed" in res.stderr, res.stderr
    records = {r["axes"]["model"].split(":")[1]: r for r in _records(ws)}
    hard, orphan = records["HardExitModel"], records["KillParentModel"]
    for record in (hard, orphan):
        assert record["status"] == "failed" and record["slurm"]["state"] == "FAILED"
        assert any("parameters" in line for line in record["log_tail"])  # the worker's log up to the exit
    assert "worker exited with status 7" in hard["error"]
    assert "the task died without reporting" in orphan["error"]
    shown = run_cli("show", hard["id"], "-w", str(ws))
    assert shown.returncode == 0 and "worker exited with status 7" in shown.stdout
    assert f"job(s) {hard['slurm']['job_id']}: FAILED" in shown.stdout


@pytest.mark.e2e
@pytest.mark.slurm
@needs_slurm
@pytest.mark.asyncio
async def test_the_app_launches_on_slurm_leaves_it_running_then_reattaches_and_stops(tmp_path: Path) -> None:
    from engine.alignment.preset import DatasetEntry, Preset, RunOptions
    from gaptui.tui.app import GaptuiApp
    from gaptui.tui.planning import SlotConfig
    from gaptui.tui.screens.confirm import ChoiceScreen

    # The app has no --force: its workspace must not be under /tmp.
    root = Path.home() / ".cache" / "gaptui-tests"
    root.mkdir(parents=True, exist_ok=True)
    ws = Workspace(Path(tempfile.mkdtemp(dir=root)) / "ws")
    preset = Preset(
        name="sleepy",
        description="",
        datasets=(DatasetEntry("er", {"n": 16, "degree": 4}, train=20, val=6),),
        noise=(0.1,),
        models=("tests.support.worker_models:SleepyModel",),
        seeds=(0,),
        run=RunOptions(epochs=200, batch_size=2, budget=5000, out_dim=8),
    )
    try:
        first = GaptuiApp(ws)
        async with first.run_test(size=SIZE) as pilot:
            assert first.launch(preset, SlotConfig(backend="slurm"))
            await wait_until(pilot, lambda: any(run_events(r)[-1:] for r in _records(ws.root)), 300, "a first event")
            (record,) = _records(ws.root)
            assert record["backend"] == "slurm" and record["slurm"]["job_id"]
            await pilot.press("ctrl+q")
            await pilot.pause()
            assert isinstance(first.screen, ChoiceScreen)
            await pilot.press("l")  # leave running
            await wait_until(pilot, lambda: not first.is_running, 60, "the app to exit")
        assert first.detached == [record["id"]]

        second = GaptuiApp(ws)
        async with second.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: second.recovered is not None, 60, "recovery")
            assert record["id"] in second.recovered.reattached
            await wait_until(pilot, lambda: second.book.get(record["hash"])["status"] == "running", 120, "running")
            await pilot.press("ctrl+q")
            await pilot.pause()
            assert isinstance(second.screen, ChoiceScreen)
            await pilot.press("s")  # stop: scancel, the worker checkpoints, recorded cancelled
            await wait_until(pilot, lambda: not second.is_running, 120, "the app to cancel its run and exit")
        (record,) = _records(ws.root)
        assert record["status"] == "cancelled" and record["slurm"]["state"] == "CANCELLED"
        assert len(record["slurm"]["jobs"]) == 1  # followed again, never submitted twice
    finally:
        for record in _records(ws.root):
            if record["status"] in ("queued", "running"):
                run_cli("cancel", record["id"], "-w", str(ws.root))
        shutil.rmtree(ws.root.parent, ignore_errors=True)


def test_the_node_task_pickles_by_a_name_that_imports() -> None:
    """submitit pickles run_task by reference; its module is the one a compute node imports."""
    import pickle

    from gaptui.backends import slurm
    from gaptui.backends.slurm_node import run_task

    assert pickle.loads(pickle.dumps(slurm.run_task)) is run_task
    # what jobs submitted before the node side moved to slurm_node hold: the function named in gaptui.backends.slurm
    assert pickle.loads(b"cgaptui.backends.slurm\nrun_task\n.") is run_task
