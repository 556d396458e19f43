"""The search: trials asked of each row's study, queued as ordinary runs, and told their value once all their
runs ended; a trial left ``RUNNING`` by a killed manager is taken up again with the same values."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.tasks import TaskSpec, family
from engine.typed import short_value
from gaptui.tune.settings import Row, TuneSettings
from gaptui.tune.studies import open_studies
from gaptui.workspace import Workspace

# ---------------------------------------------------------------------------------------------------- the search


@dataclass
class Pending:
    row: Row
    trial: Any
    specs: list[TaskSpec]
    #: Median pruner: per run, the metric of each epoch its eval events gave; the epochs reported already.
    curves: dict[str, dict[int, float]] = field(default_factory=dict)
    reported: set[int] = field(default_factory=set)


def trial_counts(study: Any) -> dict[str, int]:
    import optuna

    states = [t.state for t in study.get_trials(deepcopy=False)]
    return {
        "complete": states.count(optuna.trial.TrialState.COMPLETE),
        "pruned": states.count(optuna.trial.TrialState.PRUNED),
        "failed": states.count(optuna.trial.TrialState.FAIL),
        "running": states.count(optuna.trial.TrialState.RUNNING),
    }


def finished_count(study: Any) -> int:
    counts = trial_counts(study)
    return counts["complete"] + counts["pruned"] + counts["failed"]


def dependency_closure(specs: Iterable[TaskSpec], grid_specs: Iterable[TaskSpec]) -> list[TaskSpec]:
    """``specs`` preceded by the grid's runs they depend on (a GAPE run's pretraining), dependencies first."""
    by_hash = {s.hash(): s for s in grid_specs}
    out: dict[str, TaskSpec] = {}

    def add(spec: TaskSpec) -> None:
        for dep in family(spec.task).dependencies(spec):
            if dep in by_hash and dep not in out:
                add(by_hash[dep])
        out.setdefault(spec.hash(), spec)

    for spec in specs:
        add(spec)
    return list(out.values())


class Search:
    """Ask, queue, follow and tell: the study loop over a scheduler (local slots or Slurm)."""

    def __init__(
        self,
        ws: Workspace,
        settings: TuneSettings,
        scheduler: Any,
        history: Any,
        capacity: int,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.ws, self.settings, self.scheduler, self.history = ws, settings, scheduler, history
        self.capacity = max(1, capacity)
        self.say = say
        self.studies = open_studies(ws, settings)
        self.pending: dict[tuple[str, int], Pending] = {}

    # ------------------------------------------------------------------ queueing

    def _queue(self, specs: list[TaskSpec]) -> None:
        from gaptui.launch import enqueue_prepared

        known = self.history.by_hash()
        busy = set(self.scheduler.running) | {s.hash() for s in self.scheduler.queue}
        ended = ("done", "failed", "blocked")  # a trial run that ended is told, not run again
        todo = [s for s in dependency_closure(specs, self.settings.grid_specs)
                if s.hash() not in busy and known.get(s.hash(), {}).get("status") not in ended]  # fmt: skip
        if todo:
            enqueue_prepared(self.scheduler, todo, f"tune:{self.settings.study}")

    def _tag(self, pending: Pending) -> None:
        """Each run of a trial names the study, the row and the trial (a run shared by two trials: both)."""
        records = self.history.by_hash()
        updates = {}
        for spec in pending.specs:
            record = records.get(spec.hash())
            if record is None:
                continue
            tune = dict(record.get("tune") or {})
            trials = sorted({*tune.get("trials", []), pending.trial.number})
            tune.update({"study": self.settings.study, "row": pending.row.key, "trials": trials})
            tune.update({"of": self.settings.trials, "metric": self.settings.metric.key})
            tune.update({"seeds": list(self.settings.seeds)})  # a trial's value needs every one of them done
            tune.update({"space": [d.text() for d in self.settings.space[pending.row.key]]})
            tune.update({"params": dict(pending.trial.params)})
            tags = sorted({*(record.get("tags") or []), f"study={self.settings.study}"})
            updates[spec.hash()] = {"tune": tune, "tags": tags}
        if updates:
            self.history.update_many(updates)

    def resume(self) -> int:
        """Take up the trials a killed manager left ``RUNNING``, with their stored values."""
        import optuna

        taken = 0
        for row in self.settings.rows:
            study = self.studies[row.key]
            for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                if (row.key, trial.number) in self.pending:
                    continue
                pending = Pending(row, trial, self._trial_specs(row, trial.number, trial.params))
                self.pending[(row.key, trial.number)] = pending
                self._queue(pending.specs)
                self._tag(pending)
                taken += 1
        return taken

    def fill(self) -> None:
        """Ask new trials for rows short of ``trials`` while fewer than ``capacity`` trials are in flight."""
        dims = self.settings.space
        while len(self.pending) < self.capacity:
            short = [r for r in self.settings.rows
                     if finished_count(self.studies[r.key]) + self._in_flight(r) < self.settings.trials
                     and not self._spent(r)]  # fmt: skip
            if not short:
                return
            row = min(short, key=lambda r: finished_count(self.studies[r.key]) + self._in_flight(r))
            study = self.studies[row.key]
            trial = study.ask({d.key: d.distribution() for d in dims[row.key]})
            trial.set_user_attr("row", row.key)
            pending = Pending(row, trial, self._trial_specs(row, trial.number, trial.params))
            trial.set_user_attr("runs", [s.hash() for s in pending.specs])
            self.pending[(row.key, trial.number)] = pending
            self._queue(pending.specs)
            self._tag(pending)

    def _trial_specs(self, row: Row, number: int, params: Mapping[str, Any]) -> list[TaskSpec]:
        """The runs of a trial; values no run accepts fail the trial in the study (so that no later command takes
        it up again) and stop the search with one line naming the preset, the row, the trial and its values."""
        import optuna

        try:
            return self.settings.trial_specs(row, params)
        except GaptuiError as exc:
            _tell(self.studies[row.key], number, state=optuna.trial.TrialState.FAIL)
            why = str(exc).removeprefix(f"{self.settings.where}: [tune]: ")
            raise GaptuiError(
                f"{self.settings.where}: [tune] space: row {row.key}, trial {number} ({params_text(params)}): {why}; "
                "the trial is recorded failed"
            ) from None

    def _in_flight(self, row: Row) -> int:
        return sum(1 for key in self.pending if key[0] == row.key)

    def _spent(self, row: Row) -> bool:
        """``budget = "seconds"``: whether the row's trials (ended and in flight) trained its seconds already."""
        if self.settings.seconds is None:
            return False
        return row_seconds(self.ws, self.history.by_hash(), self.studies[row.key]) >= self.settings.seconds

    # ------------------------------------------------------------------ pruning

    def _run_file(self, record: Mapping[str, Any]) -> Path:
        folder = Path(record["run_dir"])
        return (folder if folder.is_absolute() else self.ws.root / folder) / "events.jsonl"

    def prune(self) -> None:
        """Median pruner: report each trial's metric per epoch (the mean over its seeds, once every seed reported
        that epoch) and stop the trials Optuna prunes: their runs are cancelled, the trial told ``PRUNED``."""
        if self.settings.pruner == "none":
            return
        import optuna

        from engine.events import iter_events

        records = self.history.by_hash()
        key = self.settings.metric.key
        for pkey, pending in list(self.pending.items()):
            for spec in pending.specs:
                record = records.get(spec.hash())
                if record is None or record.get("status") != "running" or not record.get("run_dir"):
                    continue
                curve = pending.curves.setdefault(spec.hash(), {})
                for event in iter_events(self._run_file(record)):
                    value = event.get("epoch"), event.get(key)
                    if (
                        event.get("event") == "eval"
                        and isinstance(value[0], int)
                        and isinstance(value[1], (int, float))
                    ):
                        curve[value[0]] = float(value[1])
            if len(pending.curves) < len(pending.specs):
                continue
            common = set.intersection(*(set(c) for c in pending.curves.values())) - pending.reported
            study = self.studies[pending.row.key]
            trial = optuna.trial.Trial(study, pending.trial._trial_id)
            for epoch in sorted(common):
                trial.report(sum(c[epoch] for c in pending.curves.values()) / len(pending.specs), epoch)
                pending.reported.add(epoch)
                if trial.should_prune():
                    for spec in pending.specs:
                        self.scheduler.cancel(spec.hash())
                    self._mark_pruned(pending)
                    _tell(study, pending.trial.number, state=optuna.trial.TrialState.PRUNED)
                    self.say(f"{pending.row.key}: trial {pending.trial.number} pruned at epoch {epoch}")
                    del self.pending[pkey]
                    break

    def _mark_pruned(self, pending: Pending) -> None:
        records = self.history.by_hash()
        updates = {}
        for spec in pending.specs:
            record = records.get(spec.hash())
            if record is not None:
                updates[spec.hash()] = {"tune": {**(record.get("tune") or {}), "pruned": True}}
        if updates:
            self.history.update_many(updates)

    # ------------------------------------------------------------------ telling

    def collect(self) -> None:
        """Tell every trial whose runs all ended: the mean metric of its runs, or FAIL when one failed."""
        import optuna

        records = self.history.by_hash()
        for key, pending in list(self.pending.items()):
            status = [records.get(s.hash(), {}).get("status") for s in pending.specs]
            ended_badly = any(s in ("failed", "blocked", "cancelled") for s in status)
            if ended_badly and all(s not in ("queued", "running") for s in status):
                _tell(self.studies[pending.row.key], pending.trial.number, state=optuna.trial.TrialState.FAIL)
                self.say(f"{pending.row.key}: trial {pending.trial.number} failed")
            elif all(s == "done" for s in status):
                values = [records[s.hash()].get("metrics", {}).get(self.settings.metric.key) for s in pending.specs]
                numbers = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(float(v))]
                study = self.studies[pending.row.key]
                if len(numbers) < len(values):
                    _tell(study, pending.trial.number, state=optuna.trial.TrialState.FAIL)
                    self.say(f"{pending.row.key}: trial {pending.trial.number}: no {self.settings.metric.key}")
                else:
                    _tell(study, pending.trial.number, sum(numbers) / len(numbers))
                    self.say(
                        f"{pending.row.key}: trial {pending.trial.number} {self.settings.metric.key} "
                        f"{sum(numbers) / len(numbers):.4f} ({params_text(pending.trial.params)})"
                    )
            else:
                continue
            del self.pending[key]

    def done(self) -> bool:
        """No trial in flight, and every row has its trials (or, by seconds, spent its seconds)."""
        return not self.pending and all(
            finished_count(self.studies[r.key]) >= self.settings.trials or self._spent(r) for r in self.settings.rows
        )

    def run(self, poll: float = 0.25) -> None:
        self.resume()
        while True:
            self.collect()
            self.prune()
            self.fill()
            if self.done():
                return
            if not self.scheduler.pending() and self.pending:
                self.collect()
                if self.pending and not self.scheduler.pending():
                    raise GaptuiError(
                        "tune: trials wait for runs that are neither queued nor running; "
                        + ", ".join(f"{p.row.key} trial {p.trial.number}" for p in self.pending.values())
                    )
                continue
            self.scheduler.step()
            time.sleep(poll)


def _tell(study: Any, number: int, value: float | None = None, state: Any = None) -> None:
    """``study.tell``; Optuna's grid sampler calls ``Study.stop`` once its grid is done, which only an ``optimize``
    loop accepts: the trial is stored all the same, so that error is not one here."""
    try:
        study.tell(number, value, state=state)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise


def run_seconds(ws: Workspace, record: Mapping[str, Any]) -> float:
    """The training seconds of one run: the sum of its ``epoch`` events' ``seconds``."""
    from engine.events import iter_events

    if not record.get("run_dir"):
        return 0.0
    folder = Path(record["run_dir"])
    path = (folder if folder.is_absolute() else ws.root / folder) / "events.jsonl"
    total = 0.0
    for event in iter_events(path):
        if event.get("event") == "epoch" and isinstance(event.get("seconds"), (int, float)):
            total += float(event["seconds"])
    return total


def row_seconds(ws: Workspace, records: Mapping[str, Mapping[str, Any]], study: Any) -> float:
    """The training seconds a row's trials spent, over every run of every trial it asked."""
    runs = {h for t in study.get_trials(deepcopy=False) for h in t.user_attrs.get("runs", [])}
    return sum(run_seconds(ws, records[h]) for h in runs if h in records)


def params_text(params: Mapping[str, Any]) -> str:
    """Sampled values as every listing and legend shows them: ``layers 4, lr 1.02e-3`` (keys in order, floats
    rounded by :func:`engine.typed.short_value`)."""
    return ", ".join(f"{k} {short_value(v)}" for k, v in sorted(params.items()))
