"""A tuning's results: each row's best trial, the final runs of its best values, the summary, the tables' view
of tuned rows, and the studies as the history tells them (study rows, sparklines, a ranking's change)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import GaptuiError
from engine.tasks import TaskSpec, family, task_of
from gaptui.tune.search import params_text, row_seconds, trial_counts
from gaptui.tune.settings import TUNED, Row, TuneSettings, column_label
from gaptui.tune.studies import storage, storage_errors, study_name, study_path
from gaptui.workspace import Workspace

# ---------------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class RowResult:
    row: Row
    complete: int
    pruned: int
    failed: int
    running: int
    best_value: float | None
    best_params: dict[str, Any]
    best_trial: int | None
    curve: list[float]
    seconds: float = 0.0


def results(ws: Workspace, settings: TuneSettings, read_only: bool = False) -> list[RowResult]:
    """Per row, read back from the study's storage: trial counts, the best trial and the best-so-far curve;
    ``read_only`` (``--status``) writes nothing, and a study not begun yet has no trial."""
    from gaptui.history.store import read_records

    path = study_path(ws, settings.study)
    if read_only and not path.exists():
        return [RowResult(row, 0, 0, 0, 0, None, {}, None, []) for row in settings.rows]
    with storage_errors(path):
        return _results(ws, settings, storage(ws, settings.study, read_only), read_records(ws))


def _results(ws: Workspace, settings: TuneSettings, store: Any, all_records: list[Any]) -> list[RowResult]:
    import optuna

    out = []
    records = {r["hash"]: r for r in all_records}
    for row in settings.rows:
        try:
            study = optuna.load_study(study_name=study_name(settings, row), storage=store)
        except KeyError:
            out.append(RowResult(row, 0, 0, 0, 0, None, {}, None, []))
            continue
        counts = trial_counts(study)
        complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
        curve: list[float] = []
        for t in sorted(complete, key=lambda t: t.number):
            value = float(t.value)
            better = max if settings.metric.higher_is_better else min
            curve.append(value if not curve else better(curve[-1], value))
        best = study.best_trial if complete else None
        out.append(
            RowResult(
                row,
                counts["complete"],
                counts["pruned"],
                counts["failed"],
                counts["running"],
                None if best is None else float(best.value),
                {} if best is None else dict(best.params),
                None if best is None else best.number,
                curve,
                row_seconds(ws, records, study),
            )
        )
    return out


def final_specs(ws: Workspace, settings: TuneSettings) -> list[tuple[RowResult, list[TaskSpec]]]:
    """Per row with a best trial: the runs of its best values on every cell with every seed."""
    return [(r, settings.final_specs(r.row, r.best_params)) for r in results(ws, settings) if r.best_trial is not None]


def final_planned(pairs: list[tuple[RowResult, list[TaskSpec]]]) -> dict[str, int]:
    """Run hash -> the seeds a tuned cell plans: every seed of the preset, so that a tuned cell that lacks some
    (a ``--final`` killed half way) reads ``(k/n)`` as a default one does."""
    from gaptui.run_records import planned_seeds_by_run

    return {h: n for _, specs in pairs for h, n in planned_seeds_by_run(specs).items()}


def tag_final(history: Any, settings: TuneSettings, pairs: list[tuple[RowResult, list[TaskSpec]]]) -> None:
    records = history.by_hash()
    planned = final_planned(pairs)
    updates = {}
    for result, specs in pairs:
        for spec in specs:
            record = records.get(spec.hash())
            if record is None:
                continue
            tune = {**(record.get("tune") or {}), "study": settings.study, "row": result.row.key, "final": True}
            tune["label"] = result.row.label
            tune["params"] = result.best_params
            tags = sorted({*(record.get("tags") or []), f"study={settings.study}"})
            updates[spec.hash()] = {"tune": tune, "tags": tags, "planned_seeds": planned[spec.hash()]}
    if updates:
        history.update_many(updates)


def summary_lines(settings: TuneSettings, rows: list[RowResult]) -> list[str]:
    metric = settings.metric
    lines = [
        f"study {settings.study} ({settings.task}): {settings.trials} trial(s) per row at "
        f"{settings.family.axis(settings.family.table.columns).name} {settings.at}, seeds "
        f"{', '.join(map(str, settings.seeds))}; {metric.key} ({metric.direction} is better); "
        f"sampler {settings.sampler}"
    ]
    for r in rows:
        space = "; ".join(d.text() for d in settings.space[r.row.key])
        best = "no trial done" if r.best_value is None else (
            f"best {metric.key} {r.best_value:.4f} (trial {r.best_trial}: {params_text(r.best_params)})"
        )  # fmt: skip
        spent = f", {r.seconds:.1f} s of training" + (f" of {settings.seconds:g}" if settings.seconds else "")
        lines.append(
            f"  {r.row.key}: {r.complete + r.pruned + r.failed}/{settings.trials} trials "
            f"({r.pruned} pruned, {r.failed} failed{spent}); {best}; space {space}"
        )
    return lines


def json_summary(settings: TuneSettings, rows: list[RowResult]) -> dict[str, Any]:
    return {
        "study": settings.study,
        "task": settings.task,
        "trials": settings.trials,
        "metric": settings.metric.key,
        "at": settings.at,
        "seeds": list(settings.seeds),
        "rows": [
            {
                "row": r.row.key,
                "complete": r.complete,
                "pruned": r.pruned,
                "failed": r.failed,
                "running": r.running,
                "best_value": r.best_value,
                "best_params": r.best_params,
                "best_trial": r.best_trial,
                "best_so_far": r.curve,
                "training_seconds": r.seconds,
                "space": [d.text() for d in settings.space[r.row.key]],
            }
            for r in rows
        ],
    }


# ---------------------------------------------------------------------------------------------------- tables


def table_view(records: Iterable[dict[str, Any]], tuned: bool = False) -> list[dict[str, Any]]:
    """Records as ranking tables see them: trial runs left out; final runs of a study left out too, or with
    ``tuned`` shown as rows ``<row> (tuned)`` beside the default ones."""
    out = []
    for record in records:
        tune = record.get("tune") if isinstance(record, dict) else None
        if not tune:
            out.append(record)
            continue
        if not (tuned and isinstance(tune, dict) and tune.get("final")):
            continue
        try:
            rows_key = family(task_of(record)).table.rows
        except GaptuiError:
            continue
        axes = dict(record.get("axes") or {})
        axes[rows_key] = f"{tune.get('label') or axes.get(rows_key)}{TUNED}"
        out.append({**record, "axes": axes})
    return out


@dataclass(frozen=True)
class StudyRow:
    """A row of a study as the history tells it (the terminal app's Runs): trials ended of those asked for, the
    best trial value so far after each ended trial (in trial order), and the metric."""

    study: str
    row: str
    ended: int
    total: int | None
    running: int
    metric: str
    best: list[float]


def study_rows(records: Iterable[Mapping[str, Any]]) -> list[StudyRow]:
    """Every study row of the history's trial runs: a trial has ended when its runs all did (done: its value is
    their mean metric; failed, cancelled, blocked: no value); it is running while one of them is queued or running."""
    trials: dict[tuple[str, str], dict[int, list[Mapping[str, Any]]]] = {}
    about: dict[tuple[str, str], tuple[int | None, str, str]] = {}
    for record in records:
        tune = record.get("tune")
        if not isinstance(tune, Mapping) or not tune.get("trials"):
            continue
        key = (str(tune.get("study")), str(tune.get("row")))
        task = str(record.get("task") or "")
        metric = tune.get("metric")
        if not metric:  # runs tagged before the metric was recorded: the family's default one
            with contextlib.suppress(GaptuiError):
                metric = family(task).default_metric
        about[key] = (tune.get("of"), str(metric or ""), task)
        for number in tune["trials"]:
            trials.setdefault(key, {}).setdefault(int(number), []).append(record)
    out = []
    for key in sorted(trials):
        total, metric, task = about[key]
        higher = True
        with contextlib.suppress(GaptuiError):
            higher = family(task).metric(metric).higher_is_better
        ended = running = 0
        best: list[float] = []
        for number in sorted(trials[key]):
            runs = trials[key][number]
            statuses = [r.get("status") for r in runs]
            if any(s in ("queued", "running", "interrupted") for s in statuses):
                running += 1
                continue
            ended += 1
            value = trial_value(runs, metric)
            if value is not None:
                best.append(value if not best else (max if higher else min)(best[-1], value))
        out.append(StudyRow(key[0], key[1], ended, total, running, metric, best))
    return out


def trial_value(runs: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    """The value of a trial from its runs' records: their mean ``metric`` once every seed the trial trains is done
    with one (the seeds its records' ``tune.seeds`` name; records tagged before those were: every run found), else
    None (a seed in flight, failed, cancelled or not recorded yet)."""
    expected: set[Any] = set()
    for record in runs:
        expected.update((record.get("tune") or {}).get("seeds") or ())
    done: dict[Any, float] = {}
    for record in runs:
        value = (record.get("metrics") or {}).get(metric)
        if record.get("status") != "done" or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        done[record.get("seed")] = float(value)
    if not done or not expected <= set(done):
        return None
    return sum(done.values()) / len(done)


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 24) -> str:
    """``values`` (the last ``width``) as one line of block characters, lowest to highest."""
    values = values[-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = high - low
    return "".join(SPARKS[0 if span == 0 else round((v - low) / span * (len(SPARKS) - 1))] for v in values)


def ranking_change(records: Iterable[Mapping[str, Any]], task: str, key: str, study: str) -> list[dict[str, Any]]:
    """Per table and column: Kendall's tau between the rows ranked by their default runs and by the final runs of
    ``study`` (metric ``key``), on the rows that have both; cells as the ranking tables make them (the family's
    centre over seeds, one protocol per cell: :func:`gaptui.analysis.build_tables`)."""
    from gaptui import analysis
    from gaptui.analysis.statistics import kendall_tau

    fam = family(task)
    mine = [
        r
        for r in records
        if r.get("task") == fam.name
        and (not r.get("tune") or ((r.get("tune") or {}).get("final") and (r.get("tune") or {}).get("study") == study))
    ]
    if not any(r.get("status") == "done" for r in mine):
        return []
    out = []
    for table in analysis.build_tables(table_view(mine, tuned=True), key, task=fam.name):
        if table.derived:
            continue
        tuned = {untuned(r): r for r in table.rows if untuned(r) != r}
        for column in table.columns:
            rows = [
                r
                for r in table.rows
                if r in tuned and table.cell(r, column) is not None and table.cell(tuned[r], column) is not None
            ]
            if len(rows) < 2:
                continue
            default = [table.cells[(r, column)].median for r in rows]
            after = [table.cells[(tuned[r], column)].median for r in rows]
            tau = kendall_tau(default, after)
            label = column_label(fam, column)
            out.append({"group": table.group, "column": label, "rows": rows, "tau": None if tau != tau else float(tau)})
    return out


def untuned(row: str) -> str:
    """The default row a tuned row stands beside: ``gin`` for ``gin (tuned)``, ``gin (epochs 20)`` for
    ``gin (tuned, epochs 20)``; any other row as it is."""
    return row.replace(TUNED, "").replace(" (tuned, ", " (")
