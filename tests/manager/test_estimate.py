"""The dry run's duration estimate: its arithmetic, the calibration cache, the history source and the CLI line."""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.alignment.throughput import CostKey, Throughput, evaluations, measure, training_seconds
from gaptui import launch
from gaptui.estimate import CellHistory, Profile, calibration_path, estimate_from_cache, schedule
from gaptui.presets import load_preset
from gaptui.scheduler import Slot
from gaptui.workspace import Workspace
from tests.support.cli import run_cli
from tests.support.fakes import CPU1, CPU2, Counting, estimator, smoke_plan


def test_training_seconds_counts_steps_checkpoints_and_evaluations() -> None:
    t = Throughput(step_s=0.5, val_pair_s=0.01, checkpoint_s=0.1)
    # 250 pairs at batch 100: 3 steps per epoch; evaluating every 2nd epoch of 3, and the last: 2 evaluations.
    seconds = training_seconds(t, epochs=3, train_pairs=250, batch_size=100, val_pairs=20, eval_every=2, startup=2)
    assert seconds == pytest.approx(2 + 3 * (3 * 0.5 + 0.1) + 2 * 20 * 0.01)
    assert evaluations(4, 2, 10) == 2 and evaluations(5, 1, 0) == 0 and evaluations(1, 5, 10) == 1


def test_schedule_respects_dependencies_and_prefers_the_faster_slot() -> None:
    cpu = Profile("cpu", "cpu", 1)
    same = {cpu: 10.0}
    runs = [("a", (), same), ("b", (), same), ("c", ("a",), {cpu: 5.0})]
    plan = schedule(runs, [cpu, cpu])
    assert (plan.wall, plan.compute) == (15.0, 25.0)
    gpu = Profile("cuda", "cuda:0", 1)
    mixed = schedule([("a", (), {cpu: 10.0, gpu: 2.0}), ("b", (), {cpu: 10.0, gpu: 2.0})], [cpu, gpu])
    assert (mixed.wall, mixed.compute) == (4.0, 4.0)  # both on the GPU one after the other beat the CPU


def test_estimate_of_a_plan_from_a_fake_calibration(tmp_path: Path) -> None:
    counter = Counting()
    plan = smoke_plan(tmp_path)
    result = estimator(tmp_path, counter).estimate(plan, [CPU1, CPU2], Workspace(tmp_path))
    # smoke: 2 epochs of 40 pairs at batch 20 (2 steps), 10 validation pairs every epoch, 1 s per run besides.
    per_run = 1.0 + 2 * (2 * 0.5) + 2 * 10 * 0.01
    assert [r.seconds[Profile("cpu", "cpu", 1)] for r in result.runs] == [pytest.approx(per_run)] * 4
    assert result.plan.compute == pytest.approx(4 * per_run) and result.plan.wall == pytest.approx(2 * per_run)
    assert {k.model for k in counter.keys} == {"gcn", "gin"} and len(counter.keys) == 2  # one key per model
    lines = result.lines()
    assert lines[0].startswith("estimate: 4 run(s): wall about 6 s on 2 cpu slot(s) x 1 thread(s); compute 13 s")
    assert any(line.split()[:3] == ["gcn", "2", "run(s)"] and "calibration (measured now)" in line for line in lines)
    assert "not counted: building 2 dataset(s) not yet in the cache" in lines[-1]


def test_calibration_is_cached_per_machine_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = smoke_plan(tmp_path)
    first = Counting()
    estimator(tmp_path, first).estimate(plan, [CPU1], Workspace(tmp_path))
    assert len(first.keys) == 2 and first.overheads == 1
    stored = calibration_path(Workspace(tmp_path)).read_bytes()

    again = Counting()
    lines = estimator(tmp_path, again).estimate(plan, [CPU1], Workspace(tmp_path)).lines()
    assert again.keys == [] and again.overheads == 0
    assert calibration_path(Workspace(tmp_path)).read_bytes() == stored
    assert all("calibration (cached)" in line for line in lines[1:3])

    two_threads = Slot("cpu#0", {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2"})
    threads = Counting()
    estimator(tmp_path, threads).estimate(plan, [two_threads], Workspace(tmp_path))
    assert {k.threads for k in threads.keys} == {2} and len(threads.keys) == 2

    import engine.tasks.cost

    real_machine = engine.tasks.cost.machine
    monkeypatch.setattr(engine.tasks.cost, "machine", lambda device="cpu": {**real_machine(device), "host": "other"})
    elsewhere = Counting()
    estimator(tmp_path, elsewhere).estimate(plan, [CPU1], Workspace(tmp_path))
    assert len(elsewhere.keys) == 2 and elsewhere.overheads == 1

    forced = Counting()
    estimator(tmp_path, forced, recalibrate=True).estimate(plan, [CPU1], Workspace(tmp_path))
    assert len(forced.keys) == 2 and forced.overheads == 1  # each key measured once, not once per run


def test_corrupt_calibration_file_is_moved_aside_and_measured_again(tmp_path: Path) -> None:
    path = calibration_path(Workspace(tmp_path))
    path.write_text('{"entries": [1, 2')
    warned: list[str] = []
    counter = Counting()
    estimator(tmp_path, counter, warned=warned).estimate(smoke_plan(tmp_path), [CPU1], Workspace(tmp_path))
    assert len(warned) == 1 and "calibration cache" in warned[0] and "moved aside" in warned[0]
    aside = list(tmp_path.glob("calibration.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_text() == '{"entries": [1, 2'
    assert len(counter.keys) == 2
    assert len(json.loads(path.read_text())["entries"]) == 3  # two models and the per-run overhead


# 4.0 s: a run alone (3.4 s besides its epochs and evaluations); 0.6 s: a run of a pack, whose duration is just its
# epochs and evaluations, so the rest comes from the measured per-run overhead (1 s here).
@pytest.mark.parametrize(("duration", "rest"), [(4.0, 3.4), (0.6, 1.0)])
def test_finished_runs_of_the_same_cell_are_preferred(tmp_path: Path, duration: float, rest: float) -> None:
    from engine.hardware import cpu_name

    plan = smoke_plan(tmp_path)
    done = plan.to_run[0]  # gcn at noise 0.05, seed 0; a seed-1 run of the same cell is estimated from it
    run_dir = tmp_path / "runs" / "x"
    run_dir.mkdir(parents=True)
    events = [{"event": "epoch", "epoch": e, "seconds": 0.25} for e in (1, 2)]
    events += [{"event": "eval", "epoch": e, "seconds": 0.05} for e in (1, 2)]
    (run_dir / "events.jsonl").write_text("".join(json.dumps({"v": 1, "t": 0, **e}) + "\n" for e in events))
    record = {
        "status": "done",
        "spec": done.to_dict(),
        "run_dir": str(run_dir),
        "duration": duration,
        "repro": {"host": platform.node(), "device": "cpu", "device_name": cpu_name()},
    }
    later = done.replace(seed=1, epochs=4)
    plan = SimpleNamespace(done=[done], to_run=[later, plan.to_run[1]], dependencies=lambda spec: ())
    counter = Counting()
    result = estimator(tmp_path, counter, records=[record]).estimate(plan, [CPU1], Workspace(tmp_path))
    history = CellHistory(epoch_s=0.25, eval_s=0.05, overhead_s=rest, runs=1)
    assert result.runs[0].source == "history (1 run(s))"
    assert result.runs[0].seconds[Profile("cpu", "cpu", 1)] == pytest.approx(history.seconds(4, 4))
    assert result.runs[1].source == "calibration (measured now)" and [k.model for k in counter.keys] == ["gin"]
    assert "(resuming: 2 of 3 left)" in result.lines()[0]


def _finished(tmp_path: Path, spec, seconds: list[float], duration: float) -> dict:
    """A record of ``spec`` finished on this host, its events timing each unit."""
    from engine.hardware import cpu_name

    run_dir = tmp_path / "runs" / spec.hash()[:12]
    run_dir.mkdir(parents=True)
    events = [{"event": "epoch", "epoch": i, "seconds": s} for i, s in enumerate(seconds, 1)]
    (run_dir / "events.jsonl").write_text("".join(json.dumps({"v": 1, "t": 0, **e}) + "\n" for e in events))
    repro = {"host": platform.node(), "device": "cpu", "device_name": cpu_name()}
    return {"status": "done", "spec": spec.to_dict(), "run_dir": str(run_dir), "duration": duration, "repro": repro}


def test_a_family_without_a_cost_model_is_estimated_from_its_cells_history(tmp_path: Path, toy: None) -> None:
    from tests.support.toy_family import ToySpec

    done = ToySpec(size=2, model="mean", steps=3)
    record = _finished(tmp_path, done, [0.5, 0.5, 0.5], duration=2.0)  # 0.5 s per step, 0.5 s besides
    later, other = done.replace(seed=1, steps=5), ToySpec(size=3, model="mean", steps=3)
    plan = SimpleNamespace(done=[done], to_run=[later, other], dependencies=lambda spec: ())
    counter = Counting()
    result = estimator(tmp_path, counter, records=[record]).estimate(plan, [CPU1], Workspace(tmp_path))
    assert [r.spec for r in result.runs] == [later]
    assert result.runs[0].seconds[Profile("cpu", "cpu", 1)] == pytest.approx(0.5 + 5 * 0.5)
    assert result.runs[0].source == "history (1 run(s))" and result.runs[0].label == "mean"
    assert counter.keys == [] and counter.overheads == 0  # nothing to measure for a family without calibration
    lines = result.lines()
    assert lines[0].startswith("estimate: 1 run(s) (1 more not estimated) (resuming: 2 of 3 left): wall about 3 s")
    assert "not estimated: 1 run(s): mean: no finished run of this cell on this machine yet" in "\n".join(lines)


@pytest.mark.e2e  # the calibration measures in worker processes
def test_measure_times_the_real_training_step_and_the_baseline() -> None:
    key = CostKey("gin", nodes=12, degree=3, batch_size=4, budget=2000, out_dim=8)
    t = measure(key, seconds=0.05)
    assert t.params > 0 and t.steps >= 1
    assert all(math.isfinite(v) and v > 0 for v in (t.step_s, t.val_pair_s, t.checkpoint_s))
    compiled = measure(
        CostKey("gcn", nodes=12, degree=3, batch_size=4, budget=2000, out_dim=8, compile=True), seconds=0
    )
    assert compiled.compile_s > 0 and compiled.step_s > 0
    base = measure(CostKey("laplacian", nodes=12, degree=3, batch_size=4, out_dim=4), seconds=0.05)
    assert base.val_pair_s > 0 and base.step_s == 0


@pytest.mark.slow
def test_measure_times_compiling_for_runs_that_compile() -> None:
    # Slow: torch.compile takes tens of seconds on a CPU even for a tiny model.
    key = CostKey("gcn", nodes=12, degree=3, batch_size=4, budget=2000, out_dim=8, compile=True)
    compiled = measure(key, seconds=0)
    assert compiled.compile_s > 0 and compiled.step_s > 0 and compiled.steps >= 1


@pytest.mark.e2e
@pytest.mark.slow  # 15-35 s of real worker processes on 2 cores: run with -m slow
def test_cli_dry_run_prints_the_estimate_and_reuses_the_calibration(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    args = ("run", "--preset", "smoke", "--dry-run", "--workspace", str(ws), "--gpus", "none", "--cpu-jobs", "1")
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert "estimate: 4 run(s): wall about " in first.stdout and "on 1 cpu slot(s) x 1 thread(s)" in first.stdout
    assert "from calibration (measured now)" in first.stdout
    cache = ws / "calibration.json"
    stamp = cache.stat().st_mtime_ns
    second = run_cli(*args)
    assert second.returncode == 0, second.stderr
    assert "from calibration (cached)" in second.stdout and "measured now" not in second.stdout
    assert cache.stat().st_mtime_ns == stamp
    alone = run_cli("run", "--preset", "smoke", "--recalibrate", "--workspace", str(ws))
    assert alone.returncode == 2 and "--recalibrate and --no-estimate go with --dry-run" in alone.stderr


def test_runs_of_a_real_dataset_not_built_yet_are_listed_not_guessed(tmp_path: Path) -> None:
    smoke = smoke_plan(tmp_path).to_run
    real = smoke[0].replace(dataset={"base": "aqsol", "noise": 0.1})
    plan = SimpleNamespace(done=[], to_run=[real, smoke[1]], dependencies=lambda spec: ())
    counter = Counting()
    lines = estimator(tmp_path, counter).estimate(plan, [CPU1], Workspace(tmp_path)).lines()
    assert lines[0].startswith("estimate: 1 run(s) (1 more not estimated): wall about ")
    assert "  not estimated: 1 run(s): aqsol: graph size unknown until its dataset is built" in "\n".join(lines)
    assert [k.model for k in counter.keys] == ["gin"]


def test_packed_seeds_share_one_process_start_per_pack(tmp_path: Path) -> None:
    smoke = smoke_plan(tmp_path).to_run
    seeds = [spec.replace(seed=seed) for seed in (0, 1, 2) for spec in smoke]  # seed-major, like a grid
    plan = SimpleNamespace(done=[], to_run=seeds, dependencies=lambda spec: ())
    alone = estimator(tmp_path, Counting()).estimate(plan, [CPU1], Workspace(tmp_path))
    packed = estimator(tmp_path, Counting()).estimate(plan, [CPU1], Workspace(tmp_path), pack_seeds=2)
    per_run = 1.0 + 2 * (2 * 0.5) + 2 * 10 * 0.01  # with the fake calibration's 1 s shared part
    assert alone.plan.compute == pytest.approx(12 * per_run)
    # 4 cells x 3 seeds in packs of at most 2: 8 processes, each paying the shared second once.
    assert packed.plan.compute == pytest.approx(12 * per_run - 4 * 1.0)
    assert sum(packed.placed.values()) == pytest.approx(packed.plan.compute)
    assert "up to 2 seeds per worker" in packed.lines()[0]


def test_the_form_estimate_uses_the_cache_and_never_measures(tmp_path: Path) -> None:
    """What the terminal app's form asks on every edit: nothing until a dry run calibrated, then the same wall."""
    ws, plan = Workspace(tmp_path), smoke_plan(tmp_path)
    assert estimate_from_cache(plan, [CPU1, CPU2], ws, []) is None  # an empty cache: no number, no measurement
    assert not calibration_path(ws).exists()
    measured = estimator(tmp_path, Counting()).estimate(plan, [CPU1, CPU2], ws)  # a dry run fills the cache
    cached = estimate_from_cache(plan, [CPU1, CPU2], ws, [])
    assert cached is not None and cached.plan.wall == pytest.approx(measured.plan.wall)
    assert {r.source for r in cached.runs} == {"calibration (cached)"}
    # Another slot layout has no cached overhead: no number rather than a guess
    assert estimate_from_cache(plan, [CPU1], ws, []) is None


def test_a_property_cell_is_estimated_per_epoch_graph_and_relation_cell_from_another_property(tmp_path: Path) -> None:
    from engine.tasks import family

    ws = Workspace(tmp_path)
    specs = launch.plan(load_preset("properties-smoke", ws), ws, {}).specs
    mean = [s for s in specs if s.pooling == "mean" and s.dimension == "generalisation"]
    done, other = mean[0], next(s for s in mean[1:] if s.property != mean[0].property)
    record = _finished(tmp_path, done, [1.0, 1.0], duration=3.0)  # 2 epochs of 1 s, 1 s besides
    plan = SimpleNamespace(done=[done], to_run=[other], dependencies=lambda spec: ())
    result = estimator(tmp_path, Counting(), records=[record]).estimate(plan, [CPU1], ws)
    fam = family("properties")
    per_unit = 2.0 / fam.costs.units(done)
    assert result.runs[0].seconds[Profile("cpu", "cpu", 1)] == pytest.approx(1.0 + fam.costs.units(other) * per_unit)
    assert result.runs[0].source == "history (1 run(s))" and result.runs[0].label == "mean"
