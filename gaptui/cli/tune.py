"""``gaptui tune --preset P``: an equal-budget search per row of the preset's table, then ``--final`` re-runs (see
:mod:`gaptui.tune` and docs/md)."""

from __future__ import annotations

import signal
import time
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from engine.errors import GaptuiError
from gaptui.cli.common import (
    CpuJobsOpt,
    GpusOpt,
    JobsPerGpuOpt,
    JsonOpt,
    WorkspaceOpt,
    console,
    err_console,
    note,
    print_json,
)
from gaptui.slots import parse_gpus
from gaptui.workspace import Workspace


def register(app: typer.Typer) -> None:
    app.command("tune")(tune_cmd)


def _say(line: str) -> None:
    err_console.print(escape(line), highlight=False, soft_wrap=True)


def tune_cmd(
    preset: Annotated[str, typer.Option("--preset", help="Preset name or TOML file with a [tune] table.")],
    study: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--study", help="Study name [default: [tune] study, else the preset's name]."),
    ] = None,
    final: Annotated[
        bool, typer.Option("--final", help="Re-run each row's best values on every cell with all the preset's seeds.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show trials per row, the estimated duration and memory; run nothing.")
    ] = False,
    status: Annotated[bool, typer.Option("--status", help="Show the study as stored; run nothing.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Start a study estimated to take more than 30 days anyway.")
    ] = False,
    gpus: GpusOpt = None,
    jobs_per_gpu: JobsPerGpuOpt = 1,
    cpu_jobs: CpuJobsOpt = None,
    pack_seeds: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--pack-seeds", help="Seeds of one trial trained in one worker [default: the preset's]."),
    ] = None,
    backend: Annotated[str, typer.Option("--backend", help="local or slurm (as `gaptui run`).")] = "local",
    workspace: WorkspaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Tune every row of a preset's table with the same number of trials (Optuna, a SQLite study per preset),
    resumable: the same command after a crash completes the study; then --final re-runs the best values."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise GaptuiError("gaptui tune needs Optuna: pip install 'gaptui[tune]'") from None
    from gaptui import launch
    from gaptui.cli.run import recover_runs
    from gaptui.tune.search import Search
    from gaptui.tune.settings import load_tune
    from gaptui.tune.studies import storage_errors, study_path

    ws = Workspace.resolve(workspace)
    loaded, settings = load_tune(preset, ws, study, note)
    options = launch.LaunchOptions(
        gpus=parse_gpus(gpus), jobs_per_gpu=jobs_per_gpu, cpu_jobs=cpu_jobs, backend=backend,
        pack_seeds=pack_seeds,
    )  # fmt: skip
    run_settings = launch.launch_settings(loaded, options, ws)
    if dry_run:
        _dry_run(settings, run_settings, final, ws, as_json)
        return
    if status:
        _report(ws, settings, as_json, read_only=True)
        return
    from gaptui.estimate import check_duration
    from gaptui.history.store import History

    # the same guard as `gaptui run`: every trial's runs (or the final runs) against 30 days, before anything starts
    one, times = _runs_per_row(settings, final)
    width = len(run_settings.slots) if run_settings.backend == "local" else max(1, len(one) * times)
    for line in check_duration(one, width, f"study {settings.study}", force, times=times)[1]:
        _say(f"note: {line}")
    with (
        History(ws, write=True, purpose=f"gaptui tune --preset {loaded.name}") as history,
        storage_errors(study_path(ws, settings.study)),
    ):
        scheduler = launch.make_backend(run_settings, ws, history)
        recover_runs(scheduler)  # as `gaptui run` does: re-attach live workers, say what was interrupted
        with _stopping(scheduler):
            if final:
                _final(ws, settings, scheduler, history)
            else:
                capacity = len(run_settings.slots) * max(1, run_settings.pack_seeds) if backend == "local" else 64
                search = Search(ws, settings, scheduler, history, capacity, _say)
                taken = search.resume()
                if taken:
                    _say(f"study {settings.study}: took up {taken} trial(s) left running by an earlier manager")
                search.run()
    _report(ws, settings, as_json)


class _stopping:
    """Ctrl-C or SIGTERM: workers checkpoint and stop; the same command resumes the study."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def __enter__(self) -> None:
        def on_term(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        self.previous = signal.signal(signal.SIGTERM, on_term)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        signal.signal(signal.SIGTERM, self.previous)
        if kind is KeyboardInterrupt:
            _say("stopping: asking workers to checkpoint and exit ...")
            self.scheduler.stop_all()
            _say("stopped; run the same command again to resume the study")
            raise typer.Exit(130)
        return False


def _final(ws: Workspace, settings: Any, scheduler: Any, history: Any) -> None:
    from gaptui import launch
    from gaptui.tune.results import final_planned, final_specs, tag_final
    from gaptui.tune.search import dependency_closure

    pairs = final_specs(ws, settings)
    if not pairs:
        raise GaptuiError(f"study {settings.study}: no trial is complete yet; run `gaptui tune` without --final first")
    specs = dependency_closure([s for _, spec_list in pairs for s in spec_list], settings.grid_specs)
    known = history.by_hash()
    todo = [s for s in specs if known.get(s.hash(), {}).get("status") != "done"]
    if todo:
        launch.enqueue_prepared(scheduler, todo, f"tune:{settings.study}", final_planned(pairs))
    tag_final(history, settings, pairs)
    _say(f"study {settings.study}: {len(specs)} final run(s), {len(specs) - len(todo)} already done")
    while scheduler.pending():
        scheduler.step()
        time.sleep(0.25)
    tag_final(history, settings, pairs)
    failed = [h for h in (s.hash() for s in specs) if history.by_hash().get(h, {}).get("status") != "done"]
    if failed:
        raise GaptuiError(f"study {settings.study}: {len(failed)} final run(s) did not finish; see `gaptui history`")


def _report(ws: Workspace, settings: Any, as_json: bool, read_only: bool = False) -> None:
    from gaptui.history.store import read_records
    from gaptui.tune.results import json_summary, ranking_change, results, summary_lines
    from gaptui.tune.studies import study_path

    rows = results(ws, settings, read_only)
    change = ranking_change(read_records(ws), settings.task, settings.metric.key, settings.study)
    if as_json:
        print_json({**json_summary(settings, rows), "kendall_tau": change})
        return
    for line in summary_lines(settings, rows):
        console.print(escape(line), highlight=False, soft_wrap=True)
    axis = settings.family.axis(settings.family.table.columns).name
    if not change:  # tau compares two rankings of the same rows: the default grid's and the final runs'
        console.print(
            f"  Kendall tau: no column has two rows with both default and final runs yet (gaptui run --preset "
            f"{settings.where}; gaptui tune --preset {settings.where} --final)",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
    for item in change:
        tau = "undefined (ties)" if item["tau"] is None else f"{item['tau']:.2f}"
        where = f"{item['group']} " if item["group"] else ""
        console.print(
            escape(
                f"  {where}{axis} {item['column']}: Kendall tau default vs tuned ranking {tau} "
                f"({len(item['rows'])} rows)"
            ),
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"storage: {study_path(ws, settings.study)}", highlight=False, soft_wrap=True, markup=False)


def _runs_per_row(settings: Any, final: bool) -> tuple[list[Any], int]:
    """One trial's runs of every row (the final runs with ``final``) at the first value of every searched key, and
    how many times they stand for the study's runs (its trials per row): the study's size without a list of all
    its runs (``trials = 1e9`` is a count, never a billion specs)."""
    specs = []
    for row in settings.rows:
        first = {d.key: d.values[0] for d in settings.space[row.key]}
        specs += settings.final_specs(row, first) if final else settings.trial_specs(row, first)
    return specs, 1 if final else settings.trials


def _dry_run(settings: Any, run_settings: Any, final: bool, ws: Workspace, as_json: bool) -> None:
    from engine.memory import check_memory, peaks_by_kind
    from gaptui.estimate import check_duration, duration_floor

    one, times = _runs_per_row(settings, final)
    needs = check_memory(one)
    runs = len(one) * times
    width = len(run_settings.slots) if run_settings.backend == "local" else max(1, runs)
    _over, lines = check_duration(one, width, f"study {settings.study}", True, times=times)
    floor, steps = duration_floor(one, width, times)
    lines = [*lines, f"estimated duration: at least {floor:.0f} s ({steps:,} optimiser steps on {width} slot(s))"]
    trials_per_row = {row.key: 0 if final else settings.trials for row in settings.rows}
    if as_json:
        print_json(
            {
                "study": settings.study,
                "trials_per_row": trials_per_row,
                "runs": runs,
                "space": {k: [d.text() for d in v] for k, v in settings.space.items()},
                "estimate": lines,
            }
        )
        return
    what = "final runs" if final else f"{settings.trials} trial(s) per row, {len(settings.seeds)} run(s) per trial"
    console.print(
        escape(
            f"study {settings.study} ({settings.task}): {len(settings.rows)} row(s), {what}, at "
            f"{settings.family.axis(settings.family.table.columns).name} {settings.at}; {runs:,} run(s)"
        ),
        highlight=False,
        soft_wrap=True,
    )
    for row in settings.rows:
        console.print(
            escape(f"  {row.key}: {trials_per_row[row.key]} trials; ")
            + escape("; ".join(d.text() for d in settings.space[row.key])),
            highlight=False,
            soft_wrap=True,
        )
    for line in lines:
        console.print(escape(line), highlight=False, soft_wrap=True)
    for kind, need in peaks_by_kind(needs).items():
        console.print(f"memory peak of {kind}: {need.line().removeprefix('memory: ')}", highlight=False, markup=False)
