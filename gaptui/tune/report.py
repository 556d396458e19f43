"""The report's "Tuning" part of a family (``gaptui report``): per study row the search space, trials run, pruned and
failed, the best values and the best trial's metric (read from the run records, counting only trials with every
seed done), Optuna's parallel-coordinate and parameter-importance figures (read from the study's SQLite file with
``optuna.visualization.matplotlib``), then Kendall's tau between the default and the tuned ranking per column."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.tasks import family
from gaptui.figures import slug

#: Statuses of a trial's run still in flight: the trial has not ended.
from gaptui.tune.results import ranking_change, study_rows, trial_value
from gaptui.tune.search import params_text

#: Statuses of a trial's run still in flight: the trial has not ended.
from gaptui.tune.studies import study_path

#: Statuses of a trial's run still in flight: the trial has not ended.
IN_FLIGHT = ("queued", "running", "interrupted")
#: Completed trials Optuna's parameter importance needs (fANOVA fits a forest over them).
IMPORTANCE_TRIALS = 2


def _trials(records: list[Mapping[str, Any]]) -> tuple[dict[Any, dict[str, Any]], dict[tuple[str, str, int], list]]:
    about: dict[Any, dict[str, Any]] = {}
    trial_runs: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for record in records:
        tune = record.get("tune")
        if not isinstance(tune, Mapping) or not tune.get("trials"):
            continue
        key = (str(tune.get("study")), str(tune.get("row")))
        info = about.setdefault(key, {"pruned": set()})
        info.update({k: tune[k] for k in ("space", "metric") if k in tune})
        for number in tune["trials"]:
            trial_runs.setdefault((*key, int(number)), []).append(record)
            if tune.get("pruned"):
                info["pruned"].add(int(number))
    return about, trial_runs


def _best(key: tuple[str, str], metric: str, higher: bool, about: dict, trial_runs: dict) -> tuple[Any, dict, int, int]:
    """(best value, its values, trials failed, trials short of a seed) over a study row's ended trials."""
    best_value, best_params, failed, short = None, {}, 0, 0
    for (study, name, number), runs in sorted(trial_runs.items()):
        if (study, name) != key or number in about["pruned"] or any(r.get("status") in IN_FLIGHT for r in runs):
            continue
        value = trial_value(runs, metric)
        if value is None:
            ran = all(r.get("status") == "done" and metric in (r.get("metrics") or {}) for r in runs)
            short, failed = (short + 1, failed) if ran else (short, failed + 1)
            continue
        if best_value is None or (value > best_value if higher else value < best_value):
            best_value, best_params = value, dict((runs[0].get("tune") or {}).get("params") or {})
    return best_value, best_params, failed, short


def report_lines(
    records: Iterable[Mapping[str, Any]], task: str, ws: Any = None, staging: Path | None = None, fmt: str = "png"
) -> list[str]:
    """The "Tuning" part for ``task`` (empty when the history holds no study of it). With ``ws`` and ``staging``
    (the report's figures folder), each study row's figures are drawn there and linked as ``figures/<name>``."""
    records = [r for r in records if r.get("task") == task]
    rows = study_rows(records)
    if not rows:
        return []
    about, trial_runs = _trials(records)
    lines = ["## Tuning", "", "A trial counts toward the best values once every seed it trains is done.", ""]
    lines += [
        "| study | row | trials | pruned | failed | space | best values | best |",
        "| --- | --- | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    studies: dict[str, str] = {}
    notes: list[str] = []
    for row in rows:
        key = (row.study, row.row)
        info = about.get(key, {"pruned": set()})
        metric = str(info.get("metric") or row.metric)
        studies[row.study] = metric
        higher = True
        with contextlib.suppress(GaptuiError):
            higher = family(task).metric(metric).higher_is_better
        best_value, best_params, failed, short = _best(key, metric, higher, info, trial_runs)
        if short:
            notes.append(f"- {row.study} / {row.row}: {short} trial(s) left out of the best, a seed not done.")
        total = "" if row.total is None else f"/{row.total}"
        best = "" if best_value is None else f"{best_value:.4f}"
        lines.append(
            f"| {row.study} | {row.row} | {row.ended}{total} | {len(info['pruned'])} | {failed} | "
            f"{'; '.join(info.get('space') or [])} | {params_text(best_params)} | {best} |"
        )
    lines += ["", *notes, ""] if notes else [""]
    if ws is not None and staging is not None:
        lines += figure_lines(ws, [(r.study, r.row, r.metric) for r in rows], task, staging, fmt)
    axis = family(task).axis(family(task).table.columns).name
    for study, metric in studies.items():
        change = ranking_change(records, task, metric, study)
        if not change:
            lines += [f"Study `{study}`: no final runs beside default runs yet (`gaptui tune --final`).", ""]
            continue
        lines += [f"Study `{study}`, Kendall's tau between the default and the tuned ranking:", ""]
        for item in change:
            tau = "undefined (ties)" if item["tau"] is None else f"{item['tau']:.2f}"
            where = f"{item['group']}, " if item["group"] else ""
            lines.append(f"- {where}{axis} {item['column']}: {tau} over {len(item['rows'])} rows")
        lines.append("")
    return lines


def figure_lines(ws: Any, rows: list[tuple[str, str, str]], task: str, staging: Path, fmt: str) -> list[str]:
    """Per study row: Optuna's parallel-coordinate figure (every completed trial's values and its value) and its
    parameter importances (fANOVA; from :data:`IMPORTANCE_TRIALS` completed trials), drawn into ``staging``, or a
    line saying why a figure is missing (no study file, too few trials, no variance)."""
    try:
        import optuna
    except ImportError:
        return ["Tuning figures need Optuna: pip install 'gaptui[tune]'.", ""]
    lines = ["### Tuning figures", ""]
    for study_name, row, metric in rows:
        path = study_path(ws, study_name)
        title = f"{study_name} / {row}"
        if not path.is_file():
            lines += [f"- {title}: no study file {path}, so no figures.", ""]
            continue
        from gaptui.tune.studies import storage

        try:
            study = optuna.load_study(study_name=f"{study_name}:{row}", storage=storage(ws, study_name, True))
        except (KeyError, GaptuiError) as exc:
            lines += [f"- {title}: the study cannot be read ({exc}).", ""]
            continue
        complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        stem = f"{task}-tuning-{slug(study_name)}-{slug(row)}"
        if not complete:
            lines += [f"- {title}: no completed trial yet, so no figures.", ""]
            continue
        drawn = _draw(study, "parallel", staging / f"{stem}-parallel.{fmt}", title, metric)
        lines += [f"![{stem}-parallel](figures/{drawn.name})", ""]
        if len(complete) < IMPORTANCE_TRIALS:
            lines += [
                f"- {title}: parameter importance needs at least {IMPORTANCE_TRIALS} completed trials "
                f"({len(complete)} so far).",
                "",
            ]
            continue
        try:
            drawn = _draw(study, "importance", staging / f"{stem}-importance.{fmt}", title, metric)
        except (RuntimeError, ValueError) as exc:  # every trial with the same values: nothing to attribute
            lines += [f"- {title}: no parameter importance ({str(exc).splitlines()[0]}).", ""]
            continue
        lines += [f"![{stem}-importance](figures/{drawn.name})", ""]
    return lines


def _draw(study: Any, kind: str, path: Path, title: str, metric: str) -> Path:
    """One of Optuna's matplotlib figures of ``study``, in the style and deterministic bytes of gaptui's figures."""
    from optuna.visualization import matplotlib as views

    from gaptui import figures

    plt = figures.pyplot()
    # Optuna's views switch the global style (ggplot): kept to this figure, the other figures keep gaptui's.
    with plt.rc_context(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the matplotlib views are marked experimental
        draw = views.plot_parallel_coordinate if kind == "parallel" else views.plot_param_importances
        ax = draw(study, target_name=metric or "value")
        for lines in ax.collections:  # the lowest trial's line in Optuna's Blues is white on white: viridis
            if lines.get_array() is not None:
                lines.set_cmap("viridis")
        fig = ax.figure
        fig.set_size_inches(figures.FULL_WIDTH, 2.8)
        for loc in ("left", "right"):
            ax.set_title("", loc=loc)
        what = "each trial's values and its value" if kind == "parallel" else "parameter importance (fANOVA)"
        ax.set_title(f"{title}: {what}", fontsize=8)
        path.parent.mkdir(parents=True, exist_ok=True)
        return figures.save_figure(fig, path)
