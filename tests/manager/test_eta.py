"""Estimates that hold: a calibration taken under another load, or too long ago, is measured again and the estimate
says why; the dry run applies the 30-day guard to the estimate it prints; a running grid counts down from the same
estimate as the dry run."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from engine.cache import write_sealed_json
from engine.errors import GaptuiError
from engine.tasks.cost import CACHE_FORMAT, CalibrationCache, Conditions
from gaptui.estimate import (
    DURATION_LIMIT,
    Estimator,
    GridEstimate,
    Profile,
    RunEstimate,
    Schedule,
    calibration_path,
    check_duration,
)
from gaptui.eta import REFRESH_EVERY, Countdown
from gaptui.workspace import Workspace
from tests.support.fakes import CPU1, CPU2, Counting, smoke_plan

T0 = 1_700_000_000.0


def _estimate(ws: Path, counter: Counting, now: Conditions, measures: bool = True) -> tuple[GridEstimate, Estimator]:
    estimator = Estimator(
        CalibrationCache(calibration_path(Workspace(ws))), measure=counter.measure, overhead=counter.overhead, now=now
    )
    estimator.measures = measures
    return estimator.estimate(smoke_plan(ws), [CPU1], Workspace(ws)), estimator


def test_a_calibration_under_another_load_or_too_old_is_measured_again_and_said(tmp_path: Path) -> None:
    busy = Counting()
    _estimate(tmp_path, busy, Conditions(T0, 4.0))  # every core crowded by four runnable processes
    assert len(busy.keys) == 2 and busy.overheads == 1

    quiet = Counting()
    result, _ = _estimate(tmp_path, quiet, Conditions(T0 + 60, 0.2))
    assert len(quiet.keys) == 2 and quiet.overheads == 1
    assert "  calibration measured again: the cached one was measured under a load of 4.0 per core, now 0.2" in (
        result.lines()
    )

    # Any load under one process per core leaves a core free: the same conditions; the estimate says when and how.
    calm = Counting()
    result, _ = _estimate(tmp_path, calm, Conditions(T0 + 3600, 0.7))
    assert calm.keys == [] and calm.overheads == 0
    assert result.lines()[-1] == (
        "  calibration from the cache, measured 59 min ago under a load of 0.2 per core (now 0.7; `--recalibrate` "
        "measures again)"
    )

    later = Counting()
    result, _ = _estimate(tmp_path, later, Conditions(T0 + 60 + 8 * 86400, 0.2))
    assert len(later.keys) == 2
    said = "the cached one was measured 8 days ago (measurements are kept 7 days)"
    assert any(said in line for line in result.lines())


def test_an_estimate_that_measures_nothing_uses_a_stale_calibration_and_says_so(tmp_path: Path) -> None:
    _estimate(tmp_path, Counting(), Conditions(T0, 0.1))
    untouched = Counting()
    result, _ = _estimate(tmp_path, untouched, Conditions(T0 + 30, 3.0), measures=False)
    assert untouched.keys == [] and result.runs and not result.missing
    assert result.stale == ["measured under a load of 0.1 per core, now 3.0"]


def test_a_calibration_cached_before_its_conditions_were_recorded_is_measured_again(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    _estimate(tmp_path, Counting(), Conditions(T0, 0.1))
    cache = CalibrationCache(calibration_path(ws))
    legacy = {k: {f: v for f, v in e.items() if f != "conditions"} for k, e in cache.entries().items()}
    write_sealed_json(calibration_path(ws), {"format": CACHE_FORMAT, "entries": legacy}, indent=1, sort_keys=True)
    again = Counting()
    result, _ = _estimate(tmp_path, again, Conditions(T0 + 30, 0.1))
    assert len(again.keys) == 2
    assert any("measured before gaptui recorded the load it was measured under" in line for line in result.lines())


def test_a_partial_estimate_over_the_limit_is_refused() -> None:
    cpu = Profile("cpu", "cpu", 1)
    spec = smoke_plan(Path("/nonexistent")).to_run[0]
    estimate = GridEstimate(
        slots=[cpu],
        done=0,
        runs=[RunEstimate(spec, "gcn", {cpu: 2 * DURATION_LIMIT}, "calibration (cached)", {cpu: 0.0})],
        missing=[(spec, "aqsol: graph size unknown until its dataset is built")],
        plan=Schedule(2 * DURATION_LIMIT, 2 * DURATION_LIMIT, {}),
    )
    with pytest.raises(GaptuiError, match="without 1 run.s. not estimated, over the limit of 30 d 0 h"):
        check_duration([spec, spec], 1, "preset p", estimate=estimate)


def test_the_dry_run_warns_when_the_estimate_it_prints_is_over_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gaptui.estimate
    from engine.alignment.throughput import Throughput
    from gaptui.cli.app import command

    # Two days a step: the smoke grid's 16 optimiser steps are far under the floor's limit, its estimate is not.
    slow = Throughput(step_s=2 * 86400.0, val_pair_s=0.01, checkpoint_s=0.0, params=100, steps=3)
    monkeypatch.setattr(gaptui.estimate, "measure_on_slots", lambda keys, slots, module, **_: [slow] * len(keys))
    monkeypatch.setattr(gaptui.estimate, "measure_overhead", lambda slots, fam: 1.0)
    args = ["run", "--preset", "smoke", "--cpu-jobs", "1", "-w", str(tmp_path / "ws")]
    dry = CliRunner().invoke(command(), [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "estimate: 4 run(s): wall about 32 d 0 h on 1 cpu slot(s)" in dry.stdout
    assert [line for line in dry.stderr.splitlines() if line.startswith("warning:")] == [
        "warning: preset smoke: estimated at about 32 d 0 h, over the limit of 30 d 0 h; `gaptui run` refuses it "
        "without --force"
    ]
    run = CliRunner().invoke(command(), args)  # from the calibration the dry run cached: refused, nothing recorded
    assert isinstance(run.exception, GaptuiError) and "over the limit of 30 d 0 h" in str(run.exception)
    assert not (tmp_path / "ws" / "history.json").exists()


def test_the_run_counts_down_from_the_dry_runs_estimate(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    plan = smoke_plan(tmp_path)
    counter = Counting()
    cache = CalibrationCache(calibration_path(ws))
    slots = [CPU1, CPU2]
    dry = Estimator(cache, measure=counter.measure, overhead=counter.overhead).estimate(plan, slots, ws)
    clock = [T0]
    countdown = Countdown(ws, clock=lambda: clock[0])
    scheduler = SimpleNamespace(finished=[], running={}, queue=deque(plan.to_run), slots=slots)
    countdown.refresh(scheduler, lambda: [])
    assert countdown.left == pytest.approx(dry.plan.wall) and countdown.text() == "ETA 6 s"

    # One run in flight for a second, the others queued: what is left of it, and the rest scheduled as before.
    first, *rest = plan.to_run
    job = SimpleNamespace(spec=first, run_hash=first.hash(), started=T0 + 29.0, run_started=None)
    scheduler.running, scheduler.queue = {first.hash(): job}, deque(rest)
    countdown.refresh(scheduler, lambda: [])
    assert countdown.left == pytest.approx(dry.plan.wall)  # nothing ended: the first estimate counts down
    scheduler.finished.append({"hash": "another"})
    countdown.refresh(scheduler, lambda: [])
    assert countdown.left == pytest.approx(dry.plan.wall)  # a run ended, but within REFRESH_EVERY of the last
    clock[0] = T0 + REFRESH_EVERY
    countdown.refresh(scheduler, lambda: [])
    per_run = dry.runs[0].seconds[Profile("cpu", "cpu", 1)]
    assert countdown.left == pytest.approx(max(per_run - 1.0 + per_run, 2 * per_run))
    clock[0] += 2.0
    assert countdown.seconds() == pytest.approx(countdown.left - 2.0)
