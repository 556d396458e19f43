"""``gaptui cancel`` and ``gaptui slurm status``, plus the Slurm options of ``gaptui run``."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from engine.errors import GaptuiError
from gaptui.cli.common import JsonOpt, WorkspaceOpt, console, err_console, print_json
from gaptui.record import record_task
from gaptui.workspace import Workspace

_SLURM = "Slurm (--backend slurm)"
SlurmRunOpts = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--slurm-option",
        help="Any other sbatch option as key=value, e.g. constraint=a100 (repeatable).",
        rich_help_panel=_SLURM,
    ),
]
PartitionOpt = Annotated[Optional[str], typer.Option("--partition", help="Slurm partition.", rich_help_panel=_SLURM)]  # noqa: UP045
AccountOpt = Annotated[Optional[str], typer.Option("--account", help="Slurm account.", rich_help_panel=_SLURM)]  # noqa: UP045
QosOpt = Annotated[Optional[str], typer.Option("--qos", help="Slurm QOS.", rich_help_panel=_SLURM)]  # noqa: UP045
TimeOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--time",
        help="Time limit per run in minutes [default: the preset's [slurm] time, else its timeout]; a run that "
        "reaches it is resubmitted and resumes from its checkpoint.",
        rich_help_panel=_SLURM,
    ),
]
GpusPerRunOpt = Annotated[Optional[int], typer.Option("--gpus-per-run", help="GPUs per run.", rich_help_panel=_SLURM)]  # noqa: UP045
CpusPerRunOpt = Annotated[Optional[int], typer.Option("--cpus-per-run", help="CPUs per run.", rich_help_panel=_SLURM)]  # noqa: UP045
MemPerRunOpt = Annotated[
    Optional[float],  # noqa: UP045
    typer.Option("--mem-per-run", help="Memory per run in GB [default: the cluster's].", rich_help_panel=_SLURM),
]
ArrayParallelismOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--array-parallelism", help="Runs of one job array running at once (Slurm's %K).", rich_help_panel=_SLURM
    ),
]
MaxRetriesOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--max-retries",
        help="Resubmissions of a run after a time-out, node failure or preemption [default: 2].",
        rich_help_panel=_SLURM,
    ),
]
DetachOpt = Annotated[
    bool,
    typer.Option(
        "--detach", help="Exit once everything is submitted; the same command re-attaches.", rich_help_panel=_SLURM
    ),
]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Start a grid estimated at over 30 days; with --backend slurm, accept a workspace under /tmp (only "
        "sensible on a single-node cluster).",
    ),
]

slurm_app = typer.Typer(help="Runs on Slurm: live state of the submitted jobs.", no_args_is_help=True)

#: Seconds ``gaptui cancel`` waits for cancelled runs to stop (Slurm's KillWait is 30 s by default).
CANCEL_WAIT = 90.0


def register(app: typer.Typer) -> None:
    app.command("cancel")(cancel_cmd)
    app.add_typer(slurm_app, name="slurm")
    slurm_app.command("status")(status_cmd)


def _live(ws: Workspace, runs: list[str], preset: str | None) -> list[dict[str, Any]]:
    """The queued or running records named by run ids (or prefixes) or by their preset."""
    from gaptui.history.store import History, read_records

    if bool(runs) == bool(preset):
        raise GaptuiError("name the runs to cancel (RUN ...) or a preset (--preset NAME), not both")
    if preset:
        from gaptui.preset_code import review_preset

        try:
            name = review_preset(preset, ws).name  # its name only: nothing the preset names is imported
        except GaptuiError:
            name = preset  # a preset file that is gone still names its runs
        chosen = [r for r in read_records(ws) if r.get("preset") == name]
        if not chosen:
            raise GaptuiError(f"--preset {preset}: no run of preset '{name}' in {ws.history}")
    else:
        with History(ws) as history:
            chosen = [history.get(run) for run in runs]
    return [r for r in chosen if r["status"] in ("queued", "running")]


def cancel_cmd(
    runs: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Argument(metavar="[RUN]...", help="Run ids (or unique prefixes)."),
    ] = None,
    preset: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--preset", help="Cancel every queued or running run of this preset."),
    ] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Cancel queued or running runs: Slurm jobs through scancel, local workers by SIGTERM.

    Workers save a checkpoint as they stop; running the grid again resumes them. When a manager holds the
    workspace it records them as cancelled; otherwise this command waits for them to stop and records it."""
    from gaptui.backends.slurm import array_ids, by_array, cancel_jobs, in_flight_on_slurm
    from gaptui.history.store import History, now
    from gaptui.processes import pid_alive
    from gaptui.runner import signal_group

    ws = Workspace.resolve(workspace)
    live = _live(ws, list(runs or []), preset)
    if not live:
        console.print("nothing to cancel: no queued or running run among those named", highlight=False)
        return
    on_slurm = [r for r in live if r["hash"] in in_flight_on_slurm(live)]
    job_ids = [r["slurm"]["job_id"] for r in on_slurm]
    if job_ids:
        cancel_jobs(ws, array_ids(job_ids, by_array(job_ids)))
    local = [r for r in live if r not in on_slurm]
    siblings = _pack_siblings(ws, local)
    if siblings:
        console.print(
            f"note: {', '.join(r['id'] for r in siblings)} share a worker with the named run(s) (packed seeds) and "
            "stop too; they resume from their checkpoints when the grid is run again",
            highlight=False,
            soft_wrap=True,
        )
        live += siblings
        local += siblings
    for record in local:
        if record.get("pid") and pid_alive(record["pid"], record["run_dir"]):
            signal_group(record["pid"], signal.SIGTERM)
    try:
        history = History(ws, write=True, purpose="gaptui cancel")
    except GaptuiError:
        console.print(
            f"cancelled {len(live)} run(s); the manager running in {ws.root} records them as they stop",
            highlight=False,
        )
        return
    with history:
        _wait_stopped(ws, on_slurm, local)
        updates = {}
        for record in live:
            if _finished_done(record):
                continue  # it finished before the cancel reached it; re-attaching files it as done
            fields: dict[str, Any] = {"status": "cancelled", "finished": now(), "pid": None}
            if record in on_slurm:
                fields["slurm"] = {**record["slurm"], "state": "CANCELLED"}
            updates[record["hash"]] = fields
        history.update_many(updates)
    console.print(
        f"cancelled {len(updates)} run(s): {', '.join(r['id'] for r in live if r['hash'] in updates)}",
        highlight=False,
        soft_wrap=True,
    )


def _pack_siblings(ws: Workspace, local: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Running records trained by the same worker process as one of ``local`` (packed seeds), not in ``local``."""
    from gaptui.history.store import read_records

    pids = {r["pid"] for r in local if r.get("pid")}
    named = {r["hash"] for r in local}
    return [r for r in read_records(ws) if r["status"] == "running" and r.get("pid") in pids and r["hash"] not in named]


def _finished_done(record: dict[str, Any]) -> bool:
    import json
    from pathlib import Path

    try:
        return json.loads((Path(record["run_dir"]) / "result.json").read_text()).get("status") == "done"
    except (FileNotFoundError, json.JSONDecodeError):
        return False


def _wait_stopped(ws: Workspace, on_slurm: list[dict[str, Any]], local: list[dict[str, Any]]) -> None:
    """Until Slurm reports the jobs ended and the local workers exited (their checkpoints are then saved)."""
    from gaptui.backends.slurm import QUEUED_STATES, RUNNING_STATES, job_state, make_watcher
    from gaptui.processes import pid_alive

    watcher = make_watcher()
    for record in on_slurm:
        watcher.register_job(record["slurm"]["job_id"])
    deadline = time.monotonic() + CANCEL_WAIT
    with err_console.status("waiting for the runs to save their checkpoints and stop ..."):
        while time.monotonic() < deadline:
            watcher.update()
            # Slurm reports CANCELLED as soon as scancel is issued, while the worker may still be saving its
            # checkpoint: a run that started is stopped once its final event is written (files are the interface).
            busy = [
                r
                for r in on_slurm
                if job_state(watcher.get_info(r["slurm"]["job_id"], mode="cache")) in (*QUEUED_STATES, *RUNNING_STATES)
                or not _worker_left(Path(r["run_dir"]))
            ]
            busy += [r for r in local if r.get("pid") and pid_alive(r["pid"], r["run_dir"])]
            if not busy:
                return
            time.sleep(1.0)
    err_console.print("[yellow]note:[/] some runs had not stopped yet; they are recorded as cancelled anyway")


def _worker_left(run_dir: Path) -> bool:
    """True when the run's worker never started, or wrote its final event (done, cancelled or error)."""
    from engine.events import read_events

    events, _ = read_events(run_dir / "events.jsonl", 0)
    return not events or events[-1].get("event") in ("done", "cancelled", "error")


def _queue_positions() -> dict[str, int]:
    """Pending job ids (array tasks expanded) by their place in the cluster's pending queue, 1 first."""
    from submitit.slurm.slurm import read_job_id

    try:
        out = subprocess.run(
            ["squeue", "-h", "-t", "PENDING", "--sort=-p,i", "-o", "%i"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    positions: dict[str, int] = {}
    for line in out.split():
        for parts in read_job_id(line):
            indices = range(int(parts[1]), int(parts[-1]) + 1) if len(parts) > 1 else [None]
            for index in indices:
                key = parts[0] if index is None else f"{parts[0]}_{index}"
                positions.setdefault(key, len(positions) + 1)
    return positions


def status_cmd(workspace: WorkspaceOpt = None, as_json: JsonOpt = False) -> None:
    """Live Slurm state of the workspace's submitted runs: state, reason, node, elapsed time, queue position."""
    from gaptui.backends.slurm import in_flight_on_slurm, job_state, make_watcher, sbatch_available
    from gaptui.history.store import read_records

    ws = Workspace.resolve(workspace)
    everything = read_records(ws)
    live = in_flight_on_slurm(everything)
    records = [r for r in everything if r["hash"] in live]
    if not records:
        console.print(f"no run of {ws.root} is queued or running on Slurm", highlight=False, markup=False)
        return
    if not sbatch_available():
        raise GaptuiError("sbatch/sacct not found on PATH; run `gaptui slurm status` on a Slurm login node")
    watcher = make_watcher()
    for record in records:
        watcher.register_job(record["slurm"]["job_id"])
    watcher.update()
    positions = _queue_positions()
    rows = []
    for record in records:
        job_id = record["slurm"]["job_id"]
        info = watcher.get_info(job_id, mode="cache")
        rows.append(
            {
                "id": record["id"],
                "job_id": job_id,
                "state": job_state(info),
                "reason": info.get("Reason"),
                "node": info.get("NodeList"),
                "elapsed": info.get("Elapsed"),
                "position": positions.get(job_id),
                "task": record_task(record),
                "cell": ", ".join(f"{k}={v}" for k, v in (record.get("axes") or {}).items()),
                "preset": record.get("preset"),
                "resubmissions": int(record["slurm"].get("retries") or 0),
            }
        )
    if as_json:
        print_json(rows)
        return
    from gaptui.cli.tables import print_table

    header = ("run", "job", "state", "reason", "node", "elapsed", "queue pos", "task", "cell", "resubm.")
    cells = [
        [
            row["id"],
            str(row["job_id"] or ""),
            str(row["state"] or ""),
            row["reason"] or "",
            row["node"] or "",
            row["elapsed"] or "",
            str(row["position"] or ""),
            row["task"],
            row["cell"],
            str(row["resubmissions"]),
        ]
        for row in rows
    ]
    print_table(console, f"{len(rows)} run(s) of {ws.root} on Slurm", header, cells, ids=(0, 1))
