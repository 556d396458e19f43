"""Slurm jobs seen from the manager: job states read through sacct (a submitit watcher), the files submitit keeps
per job, cancelling, and which history records are in flight on the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gaptui.workspace import Workspace

QUEUED_STATES = ("PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING", "SUSPENDED", "RESIZING")
RUNNING_STATES = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING")
#: States after which the run is submitted again (it resumes from its checkpoint).
RETRY_STATES = ("TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE")
FAILED_STATES = ("FAILED", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT")


def in_flight_on_slurm(records: list[dict[str, Any]]) -> set[str]:
    """Hashes of runs submitted to Slurm and not filed yet: no local manager may start them a second time."""
    return {
        r["hash"]
        for r in records
        if r.get("backend") == "slurm" and r["status"] in ("queued", "running") and (r.get("slurm") or {}).get("job_id")
    }


def _watcher_class() -> type:
    from submitit.slurm.slurm import SlurmInfoWatcher

    class Watcher(SlurmInfoWatcher):
        """submitit's sacct watcher, asking also for the reason, node, elapsed time and exit code."""

        def _make_command(self) -> list[str] | None:
            command = super()._make_command()
            if command is None:
                return None
            return ["sacct", "-o", "JobID,State,Reason,NodeList,Elapsed,ExitCode", *command[3:]]

    return Watcher


def make_watcher() -> Any:
    return _watcher_class()(delay_s=600)


def elapsed_seconds(text: str | None) -> float | None:
    """sacct's ``[D-]HH:MM:SS`` as seconds; None when absent."""
    if not text:
        return None
    days, _, clock = text.rpartition("-")
    try:
        parts = [int(p) for p in clock.split(":")]
        return float(int(days or 0) * 86400 + sum(v * 60**i for i, v in enumerate(reversed(parts))))
    except ValueError:
        return None


def job_state(info: dict[str, str]) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``; ``UNKNOWN`` while sacct does not know the job yet."""
    return (info.get("State") or "UNKNOWN").split()[0].rstrip("+")


def job_paths(ws: Workspace, job_id: str) -> Any:
    from submitit.core.utils import JobPaths

    return JobPaths(slurm_folder(ws), job_id=job_id, task_id=0)


def slurm_folder(ws: Workspace) -> Path:
    """Where submitit keeps each job's pickles and Slurm logs: ``<workspace>/slurm/<job id>/``."""
    return ws.slurm_logs / "%j"


def task_result(ws: Workspace, job_id: str) -> tuple[str, Any] | None:
    """What :func:`run_task` returned (``("success", dict)``) or raised (``("error", traceback)``); None: nothing."""
    from submitit.core.utils import pickle_load

    path = job_paths(ws, job_id).result_pickle
    try:
        return pickle_load(path)
    except (FileNotFoundError, EOFError):
        return None


def cancel_jobs(ws: Workspace, job_ids: list[str]) -> None:
    """scancel through submitit; ids of whole arrays (``123``) cancel every task of the array at once."""
    from submitit import SlurmJob

    for job_id in job_ids:
        SlurmJob(slurm_folder(ws), job_id).cancel(check=False)


def array_ids(job_ids: list[str], everything: dict[str, list[str]]) -> list[str]:
    """The fewest ids to scancel: an array's own id when all its tasks are meant, else the task ids."""
    wanted = set(job_ids)
    out = []
    for array, tasks in everything.items():
        mine = [t for t in tasks if t in wanted]
        out += [array] if mine and len(mine) == len(tasks) else mine
    return out


def by_array(job_ids: list[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for job_id in job_ids:
        groups.setdefault(job_id.split("_")[0], []).append(job_id)
    return groups
