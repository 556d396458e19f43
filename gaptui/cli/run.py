"""``gaptui run``: a preset's grid, headless, on this machine's slots or Slurm, with its live progress."""

from __future__ import annotations

import os
import signal
import time
from typing import Annotated, Any, Optional

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from engine.errors import GaptuiError
from gaptui.cli.common import (
    CpuJobsOpt,
    GpusOpt,
    JobsPerGpuOpt,
    WorkspaceOpt,
    console,
    err_console,
    note,
    warn,
)
from gaptui.cli.slurm import (
    AccountOpt,
    ArrayParallelismOpt,
    CpusPerRunOpt,
    DetachOpt,
    ForceOpt,
    GpusPerRunOpt,
    MaxRetriesOpt,
    MemPerRunOpt,
    PartitionOpt,
    QosOpt,
    SlurmRunOpts,
    TimeOpt,
)
from gaptui.durations import format_duration
from gaptui.slots import parse_gpus
from gaptui.workspace import Workspace

#: Rows of live runs in the progress display.
PROGRESS_ROWS = 24


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)


RunPresetOpt = Annotated[str, typer.Option("--preset", help="Preset name (presets/*.toml) or path to a TOML file.")]
RunDryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Show the plan, the start order and its estimated duration; run nothing.")
]
RunRecalibrateOpt = Annotated[
    bool, typer.Option("--recalibrate", help="With --dry-run: measure throughput again instead of the cache.")
]
RunNoEstimateOpt = Annotated[
    bool, typer.Option("--no-estimate", help="With --dry-run: skip the duration estimate (and its calibration).")
]
RunRetryFailedOpt = Annotated[bool, typer.Option("--retry-failed", help="Run failed runs again.")]
RunTimeoutOpt = Annotated[
    Optional[float],  # noqa: UP045
    typer.Option("--timeout", help="Seconds per run before it is stopped [default: the preset's]."),
]
RunPackSeedsOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--pack-seeds",
        help="Train up to K seeds of one cell in one worker process on one slot (local backend) "
        "[default: the preset's pack_seeds, else 1].",
    ),
]
RunBackendOpt = Annotated[
    str,
    typer.Option(
        "--backend",
        help="Where runs execute: local (this machine) or slurm (job arrays through submitit; the workspace "
        "must be on a filesystem the compute nodes see under the same path).",
    ),
]
RunListAllOpt = Annotated[
    bool,
    typer.Option("--list", help="With --dry-run: also list every run in start order and every dataset's memory."),
]
RunFailFastOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--fail-fast",
        metavar="N",
        help="Stop queuing once N runs failed with the same error (running ones finish; the rest is recorded "
        "cancelled): exit 1 naming the error.",
    ),
]


def run_cmd(
    preset: RunPresetOpt,
    workspace: WorkspaceOpt = None,
    dry_run: RunDryRunOpt = False,
    recalibrate: RunRecalibrateOpt = False,
    no_estimate: RunNoEstimateOpt = False,
    gpus: GpusOpt = None,
    jobs_per_gpu: JobsPerGpuOpt = 1,
    cpu_jobs: CpuJobsOpt = None,
    retry_failed: RunRetryFailedOpt = False,
    timeout: RunTimeoutOpt = None,
    pack_seeds: RunPackSeedsOpt = None,
    backend: RunBackendOpt = "local",
    slurm: SlurmRunOpts = None,
    partition: PartitionOpt = None,
    account: AccountOpt = None,
    qos: QosOpt = None,
    time_min: TimeOpt = None,
    gpus_per_run: GpusPerRunOpt = None,
    cpus_per_run: CpusPerRunOpt = None,
    mem_per_run: MemPerRunOpt = None,
    array_parallelism: ArrayParallelismOpt = None,
    max_retries: MaxRetriesOpt = None,
    detach: DetachOpt = False,
    force: ForceOpt = False,
    list_all: RunListAllOpt = False,
    fail_fast: RunFailFastOpt = None,
) -> None:
    """Run a preset's grid: skips finished runs, so the same command resumes an interrupted grid.

    With --backend slurm, runs go out as job arrays; the next `gaptui run` of the preset re-attaches to them.
    From another terminal, `gaptui queue pause`, `resume` and `drain SLOT` steer the grid while it runs."""
    from gaptui import launch
    from gaptui.preset_code import review_preset

    ws = Workspace.resolve(workspace)
    # Before validation imports it: the user code this preset runs (the command was typed, so it runs).
    spec_preset = review_preset(preset, ws).load(note)
    for line in spec_preset.notes:
        note(f"{spec_preset.path or spec_preset.name}: {line}")
    slurm_settings = None
    if backend == "slurm":
        slurm_settings = _slurm_settings(
            spec_preset, slurm, partition, account, qos, time_min, gpus_per_run, cpus_per_run, mem_per_run,
            array_parallelism, max_retries,
        )  # fmt: skip
    elif backend == "local" and detach:
        raise GaptuiError("--detach needs --backend slurm (local workers stop with the manager)")
    _check_dry_run_flags(dry_run, recalibrate, no_estimate, list_all)
    _warn_cpu_jobs(cpu_jobs)
    options = launch.LaunchOptions(
        gpus=parse_gpus(gpus),
        jobs_per_gpu=jobs_per_gpu,
        cpu_jobs=cpu_jobs,
        backend=backend,
        timeout=timeout,
        pack_seeds=pack_seeds,
        retry_failed=retry_failed,
        slurm=slurm_settings,
        force=force,
        fail_fast=fail_fast,
    )
    settings = launch.launch_settings(spec_preset, options, ws)

    if dry_run:
        _dry_run(ws, spec_preset, settings, list_all, recalibrate, no_estimate)
        return
    _run_grid(ws, spec_preset, settings, retry_failed, detach, force)


def _slurm_settings(
    spec_preset: Any,
    slurm: list[str] | None,
    partition: str | None,
    account: str | None,
    qos: str | None,
    time_min: int | None,
    gpus_per_run: int | None,
    cpus_per_run: int | None,
    mem_per_run: float | None,
    array_parallelism: int | None,
    max_retries: int | None,
) -> Any:
    """The Slurm settings of ``--backend slurm``: the preset's, with the command line's options over them."""
    from gaptui.backends.slurm import parse_slurm_options
    from gaptui.presets import slurm_options as preset_slurm

    return preset_slurm(spec_preset).merged(
        partition=partition,
        account=account,
        qos=qos,
        time=time_min,
        gpus_per_run=gpus_per_run,
        cpus_per_run=cpus_per_run,
        mem_per_run=mem_per_run,
        array_parallelism=array_parallelism,
        max_retries=max_retries,
        options=parse_slurm_options(slurm or []),
    )


def _check_dry_run_flags(dry_run: bool, recalibrate: bool, no_estimate: bool, list_all: bool) -> None:
    """Refuse --recalibrate, --no-estimate and --list without --dry-run, and --recalibrate with --no-estimate."""
    if (recalibrate or no_estimate) and not dry_run:
        raise GaptuiError("--recalibrate and --no-estimate go with --dry-run")
    if list_all and not dry_run:
        raise GaptuiError("--list goes with --dry-run (a run prints its progress instead)")
    if recalibrate and no_estimate:
        raise GaptuiError("--recalibrate measures for the estimate that --no-estimate skips: give one of them")


def _warn_cpu_jobs(cpu_jobs: int | None) -> None:
    """Warn when --cpu-jobs asks for more concurrent runs than this machine has cores."""
    cores = len(os.sched_getaffinity(0))
    if cpu_jobs is not None and cpu_jobs > cores:
        err_console.print(
            f"[yellow]warning:[/] --cpu-jobs {cpu_jobs} is more than the {cores} cores of this machine; runs will "
            "compete for them and each will be slower"
        )


def _dry_run(
    ws: Workspace, spec_preset: Any, settings: Any, list_all: bool, recalibrate: bool, no_estimate: bool
) -> None:
    """``--dry-run``: print the plan, its start order and (unless --no-estimate) its estimated duration."""
    from gaptui import launch
    from gaptui.history.store import read_records

    records = read_records(ws)
    launch_plan = launch.plan_launch(spec_preset, ws, records, settings)
    _print_plan_notes(launch_plan.plan)
    for line in launch_plan.summary(list_all):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    estimate = None
    if no_estimate:
        pass
    elif settings.backend == "slurm":
        console.print(
            "estimate: not available for --backend slurm (throughput is measured on this machine, not on the "
            "cluster's nodes)",
            highlight=False,
        )
    else:
        estimate, lines = _estimate(ws, launch_plan.plan, settings.slots, recalibrate, settings.pack_seeds)
        for line in lines:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    # The guard `gaptui run` applies, with the estimate just printed when there is one (else the cached one or
    # the floor of the optimiser steps): over the limit, said as a warning.
    over, lines = launch_plan.duration_lines(ws, records, force=True, estimate=estimate)
    if over:
        warn(lines[0].replace("; starting it as --force asks", "; `gaptui run` refuses it without --force"))


def _run_grid(ws: Workspace, spec_preset: Any, settings: Any, retry_failed: bool, detach: bool, force: bool) -> None:
    """Start the grid's runs and follow them to the end (or leave them to Slurm with --detach); exit 1 on failures."""
    from gaptui import launch
    from gaptui.history.store import History, read_records

    # Before anything is recorded: a grid that would run for months is refused (--force insists).
    records = read_records(ws)
    duration = launch.plan_launch(spec_preset, ws, records, settings).duration_lines(ws, records, force)[1]
    from gaptui.queue_control import ControlChannel

    purpose = f"gaptui run --preset {spec_preset.name}"
    with History(ws, write=True, purpose=purpose) as history, ControlChannel(ws, purpose) as channel:
        scheduler = launch.make_backend(settings, ws, history)
        channel.publish(scheduler.control, scheduler.slots, 0, 0)  # `gaptui queue` finds it while inputs are built
        recover_runs(scheduler)
        launch_plan = launch.plan_launch(spec_preset, ws, history.records(), settings)
        grid_plan = launch_plan.plan
        _print_plan_notes(grid_plan)
        for line in duration:
            err_console.print(escape(line), highlight=False, soft_wrap=True)
        elsewhere = _in_flight_elsewhere(settings, history, grid_plan, spec_preset.name)
        launched = _start_runs(launch_plan, scheduler, elsewhere)
        if settings.backend == "slurm":
            scheduler.step()  # submits what is ready: a submission that fails is said before anything else
        _print_launched(launched, scheduler, settings, spec_preset.name, grid_plan, elsewhere, retry_failed)
        hashes = {s.hash() for s in grid_plan.specs}
        if detach:
            _detach(scheduler, spec_preset.name)
            return
        from gaptui.eta import Countdown

        countdown = Countdown(ws, settings.pack_seeds) if settings.backend == "local" else None
        _drive(scheduler, history, hashes, spec_preset.name, channel, countdown)
        failed = [f for f in scheduler.finished if f.get("status") in ("failed", "blocked")]
        skipped_failed = [h for h, r in history.by_hash().items() if h in hashes and r["status"] == "failed"]
    _final_tables(ws, grid_plan.specs, spec_preset.task)
    if scheduler.control.halted:
        err_console.print(
            f"[red]fail-fast:[/] {escape(scheduler.control.halted)}; the runs not started were recorded cancelled: "
            "fix the cause, then the same command runs them",
            highlight=False,
            soft_wrap=True,
        )
    _exit_if_failed(failed, skipped_failed)


def recover_runs(scheduler: Any) -> None:
    """Re-attach to the runs still running and queue the interrupted ones again, saying how many."""
    reattached, requeued = scheduler.recover()
    if reattached or requeued:
        err_console.print(
            f"found {len(reattached)} run(s) still running (re-attached) and {len(requeued)} interrupted "
            "run(s) (queued again; they resume from their checkpoints)"
        )


def _in_flight_elsewhere(settings: Any, history: Any, grid_plan: Any, preset: str) -> set[str]:
    """The hashes of the grid's runs in flight on Slurm, which a local run leaves to it (said on stderr)."""
    elsewhere: set[str] = set()
    if settings.backend == "local":
        from gaptui.backends.slurm import in_flight_on_slurm

        elsewhere = in_flight_on_slurm(history.records()) & {s.hash() for s in grid_plan.to_run}
        if elsewhere:
            err_console.print(
                f"{len(elsewhere)} run(s) of this grid are in flight on Slurm and are left to it; re-attach "
                f"with `gaptui run --preset {preset} --backend slurm`",
                highlight=False,
            )
    return elsewhere


def _start_runs(launch_plan: Any, scheduler: Any, elsewhere: set[str]) -> Any:
    """Prepare the runs' inputs under a status line and queue them (``launch.start``)."""
    from gaptui import launch
    from gaptui.cli.progress import step_progress

    with step_progress("preparing the grid's inputs (datasets, caches)") as update:
        return launch.start(
            launch_plan, scheduler, lambda done, total, label: update(label, done, total), leave=elsewhere
        )


def _print_launched(
    launched: Any,
    scheduler: Any,
    settings: Any,
    preset: str,
    grid_plan: Any,
    elsewhere: set[str],
    retry_failed: bool,
) -> None:
    """The runs that failed before starting, then the grid's counts: done, failed before, to run and where."""
    from gaptui.recovery import foreground_line

    by_error: dict[str, list[str]] = {}
    for run_hash, error in launched.failed.items():  # an input that failed fails every run it feeds: said once
        by_error.setdefault(error, []).append(run_hash[:12])
    for error, runs in by_error.items():
        which = (
            f"run {runs[0]}"
            if len(runs) == 1
            else f"{len(runs)} runs ({', '.join(runs[:3])}{', ...' * (len(runs) > 3)})"
        )
        err_console.print(f"[red]{which} failed before starting:[/] {escape(error)}", highlight=False, soft_wrap=True)
    where = "Slurm" if settings.backend == "slurm" else f"{len(settings.slots)} slot(s)"
    grid = {s.hash() for s in grid_plan.specs}
    # The grid's runs only: runs re-attached from another grid, or trained by a `gaptui train`, are not its own.
    to_run = len(launched.queued) + len(set(scheduler.running) & grid) + len(elsewhere & grid)
    foreground = f", {len(launched.foreground)} trained by `gaptui train` (waited for)" if launched.foreground else ""
    err_console.print(
        f"preset {preset}: {len(grid_plan.specs)} runs, {len(grid_plan.done)} already done, "
        f"{len(grid_plan.failed)} failed before"
        f"{' (retrying)' if retry_failed else ' (skipped; --retry-failed to rerun)'}, "
        f"{to_run} to run on {where}{foreground}",
        highlight=False,
        markup=False,
    )
    others = [r for r in scheduler.foreground if r["hash"] not in grid]
    for line in (
        foreground_line(launched.foreground, "this grid waits for it (its result is the grid's)"),
        foreground_line(others, "not in this grid: left to it"),
    ):
        if line:
            err_console.print(line, highlight=False, markup=False, soft_wrap=True)


def _detach(scheduler: Any, preset: str) -> None:
    """``--detach``: submit everything queued and leave the runs to Slurm."""
    scheduler.step()  # submits everything queued
    left = scheduler.detach()
    err_console.print(
        f"detached: {len(left)} run(s) queued or running on Slurm; follow them with `gaptui slurm status`, "
        f"re-attach with `gaptui run --preset {preset} --backend slurm`",
        highlight=False,
    )


def _exit_if_failed(failed: list[Any], skipped_failed: list[str]) -> None:
    """Exit 1 when runs of the grid failed, were blocked, or stay failed (skipped without --retry-failed)."""
    if failed:
        err_console.print(
            f"[red]{len(failed)} run(s) failed or blocked[/]; see `gaptui history --status failed --status blocked` "
            "and `gaptui show RUN`; rerun with --retry-failed"
        )
        raise typer.Exit(1)
    if skipped_failed:
        # The grid is not complete while failed cells remain: say so in the exit status too.
        err_console.print(
            f"[red]{len(skipped_failed)} run(s) of the preset are failed[/] (skipped); rerun with --retry-failed"
        )
        raise typer.Exit(1)


def _print_plan_notes(grid_plan: Any) -> None:
    """The plan's warnings and what it runs again, on stderr."""
    for line in grid_plan.warnings:
        warn(line)
    for line in grid_plan.redo_lines():
        err_console.print(escape(line), highlight=False, soft_wrap=True)


def _estimate(
    ws: Workspace, grid_plan: Any, slots: list[Any], recalibrate: bool, pack_seeds: int
) -> tuple[Any, list[str]]:
    """The dry run's duration estimate (``gaptui.estimate``), calibrating on this machine where needed, and its
    lines (the estimate None when it failed)."""
    from engine.tasks.cost import CalibrationCache
    from gaptui.cli.progress import step_progress
    from gaptui.estimate import Estimator, calibration_path
    from gaptui.history.store import read_records

    def warn(line: str) -> None:
        err_console.print(f"[yellow]{escape(line)}[/]", highlight=False, soft_wrap=True)

    records = read_records(ws)
    with step_progress("estimating") as progress:
        estimator = Estimator(
            CalibrationCache(calibration_path(ws), warn), records, recalibrate=recalibrate, progress=progress
        )
        try:
            found = estimator.estimate(grid_plan, slots, ws, pack_seeds)
        except GaptuiError as exc:
            # The plan above stands; only the measurement failed (a user model that crashes, no disk space...).
            return None, [f"estimate: not available: {exc}"]
    return found, found.lines()


def _drive(scheduler: Any, history: Any, hashes: set[str], preset: str, channel: Any, countdown: Any = None) -> None:
    """Run the scheduler with a live display (piped: a line per finished run), its ETA from ``countdown`` (a
    :class:`gaptui.eta.Countdown`; None on Slurm), steered by ``channel`` (``gaptui queue``); Ctrl-C (or SIGTERM)
    stops every worker cleanly."""

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    from gaptui.queue_control import steer

    previous = signal.signal(signal.SIGTERM, on_term)
    started = time.time()
    live_display = console.is_terminal

    def say(line: str) -> None:
        err_console.print(f"queue: {line}", highlight=False, markup=False, soft_wrap=True)

    try:
        with (
            Live(
                _progress(scheduler, history, hashes, preset, started, countdown),
                console=console,
                auto_refresh=False,
                transient=False,
            )
            if live_display
            else _NullLive() as live
        ):
            seen = 0
            while scheduler.pending():
                steer(channel, scheduler, say)
                scheduler.step()
                if countdown is not None:
                    countdown.refresh(scheduler, history.records)
                if live_display:
                    live.update(_progress(scheduler, history, hashes, preset, started, countdown), refresh=True)
                for item in scheduler.finished[seen:]:
                    seen += 1
                    if not live_display:
                        _print_finished(history, item, countdown)
                time.sleep(0.25)
            for item in scheduler.finished[seen:]:
                if not live_display:
                    _print_finished(history, item, None)
    except KeyboardInterrupt:
        err_console.print("stopping: asking workers to checkpoint and exit ...")
        scheduler.stop_all()
        err_console.print("stopped; run the same command again to resume the grid")
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


class _NullLive:
    def __enter__(self) -> _NullLive:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _print_finished(history: Any, item: dict[str, Any], countdown: Any) -> None:
    """One line for a run that ended (output piped: no live display), with the grid's ETA while runs are left."""
    from gaptui.columns import describe, record_family, result_metric, result_text

    record = history.by_hash().get(item["hash"], {})
    fam = record_family(record)
    result = result_text(record)
    extra = f"{result_metric(fam).name} {result}" if result and fam else (record.get("error") or "")
    if countdown is not None and countdown.left:
        extra += f"  ({countdown.text()})"
    console.print(
        f"{record.get('status', '?'):>9}  {record.get('id')}  {describe(record)} seed {record.get('seed')}  {extra}",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )


def _progress(
    scheduler: Any, history: Any, hashes: set[str], preset: str, started: float, countdown: Any = None
) -> Group:
    from gaptui import analysis
    from gaptui.columns import describe, record_family, result_metric, run_position

    records = [r for r in history.records() if r["hash"] in hashes]
    statuses = ("done", "running", "failed", "blocked", "queued")
    counts = {s: sum(1 for r in records if r["status"] == s) for s in statuses}
    total = len(hashes)
    remaining = total - counts["done"] - counts["failed"] - counts["blocked"]
    eta = f" · {countdown.text()}" if countdown is not None and remaining else ""
    head = Text.from_markup(
        f"[bold]{escape(preset)}[/]: "
        + " · ".join(f"{s} {counts[s]}" for s in statuses if counts[s] or s in ("done", "running", "queued"))
        + f" · total {total} · elapsed {format_duration(time.time() - started)}{escape(eta)}"
        + (f" · [yellow]{escape(control)}[/]" if (control := scheduler.control.state_line()) else "")
    )
    table = Table(box=None, pad_edge=False)
    table.add_column("run", no_wrap=True, min_width=12)  # an id to copy into `gaptui show`: never cut
    for col in ("run of", "seed", "epoch", "last", "slot"):
        table.add_column(col)
    by_hash = {r["hash"]: r for r in records}
    # Started runs first; a Slurm grid follows thousands of pending ones, which the counts above cover.
    shown = sorted(scheduler.running.values(), key=lambda job: not job.last)[:PROGRESS_ROWS]
    for job in shown:
        last = job.last
        record = by_hash.get(job.run_hash, {})
        epoch = run_position(last, job.progress, last.get("epochs") or getattr(job.spec, "epochs", None))
        fam = record_family(record)
        key = result_metric(fam).key if fam else ""
        value = last.get(key, last.get("val_acc") if last.get("event") == "epoch" else None)
        table.add_row(
            job.run_dir.name,
            escape(describe(record)),
            str(job.spec.seed),
            epoch,
            f"{value:.3f}" if isinstance(value, float) else "",
            job.slot.name,
        )
    leaders = Table(box=None, pad_edge=False, title="leaders (best median over finished runs)")
    for col in ("task", "table", "best", "value"):
        leaders.add_column(col)
    for task in analysis.record_tasks(records):
        fam = record_family({"task": task})
        if fam is None:
            continue
        for t in analysis.build_tables(records, result_metric(fam), task=task):
            best = [c for col in t.columns for c in t.best(col)]
            if best:
                top = max(best, key=lambda c: c.median if t.metric.higher_is_better else -c.median)
                where = f"{top.row} @ {t.header(top.column)}"
                leaders.add_row(task, escape(t.group or "-"), escape(where), top.text(t.metric))
    return Group(head, table, leaders)


def _final_tables(ws: Workspace, specs: list[Any], task: str) -> None:
    from gaptui import analysis
    from gaptui.history.store import read_records

    hashes = {s.hash() for s in specs}
    records = [r for r in read_records(ws) if r["hash"] in hashes]
    for table in analysis.build_tables(records, task=task):
        console.print(analysis.render_rich(table, analysis.gap_analysis(table), width=console.width))
