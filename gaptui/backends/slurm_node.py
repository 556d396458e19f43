"""The Slurm backend on a compute node: one array task runs the usual worker on its run folder.

submitit pickles :func:`run_task` by reference (module and name): it must stay importable under this name.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from engine.events import EXIT_CANCELLED, read_events
from engine.tasks import load_spec
from gaptui.processes import tail
from gaptui.runner import signal_group, start_worker


def run_task(spec: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """One array task: the worker on its run folder. SIGUSR2 (time limit near) and SIGTERM (scancel) reach it as
    SIGTERM, so it saves a checkpoint; returns its exit status and the signal that stopped it."""
    out = Path(run_dir)
    received: list[str] = []
    # Slurm signals every process of the job: the worker inherits "ignore SIGUSR2" (the signal would kill it) and
    # gets the warning as SIGTERM from here instead. A warning during these few lines is missed: the time limit
    # then ends the job (TIMEOUT) and the run resumes from its last epoch.
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "1")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "stderr.txt", "a") as stderr:
        proc = start_worker(
            load_spec(spec),
            out,
            env={"OMP_NUM_THREADS": cpus, "MKL_NUM_THREADS": cpus},
            quiet=True,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )

    def forward(signum: int, _frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        signal_group(proc.pid, signal.SIGTERM)

    # Replaces submitit's own handlers: the worker checkpoints itself and the manager decides about resubmission.
    for sig in (signal.SIGUSR2, signal.SIGTERM):
        signal.signal(sig, forward)
    code = proc.wait()
    if code not in (0, EXIT_CANCELLED):
        # Raising makes Slurm record the job FAILED, with this line in the task's result.
        status = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        raise RuntimeError(f"worker {status}: {_last_error(out)}")
    return {"exit": code, "signal": received[0] if received else None, "host": socket.gethostname()}


def _last_error(run_dir: Path) -> str:
    errors = [e for e in read_events(run_dir / "events.jsonl")[0] if e.get("event") == "error"]
    if errors:
        return str(errors[-1].get("message"))
    return (tail(run_dir / "stderr.txt", 1) or ["no error message"])[0]
