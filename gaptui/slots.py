"""Device slots: where worker processes run (one GPU share or a group of CPU cores each) and GPU detection."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from engine.typed import ascii_count


@dataclass
class Slot:
    """Where a worker runs: environment overrides (CUDA_VISIBLE_DEVICES, thread counts) and its occupant."""

    name: str
    env: dict[str, str]
    busy: str | None = None


def detect_gpus() -> list[str]:
    """GPU indices visible to this process (``nvidia-smi -L``; honours CUDA_VISIBLE_DEVICES), no torch import."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU")]


def make_slots(gpus: list[str] | None = None, jobs_per_gpu: int = 1, cpu_jobs: int | None = None) -> list[Slot]:
    """``jobs_per_gpu`` slots per GPU; CPU slots when there is no GPU (or when ``cpu_jobs`` is given).

    The cores are split between the slots' workers (``OMP_NUM_THREADS``), never above a thread count the caller
    already pinned in its own environment.
    """
    gpus = detect_gpus() if gpus is None else gpus
    cpus = len(os.sched_getaffinity(0))
    pinned = os.environ.get("OMP_NUM_THREADS", "")
    cap = ascii_count(pinned) or cpus

    def share(jobs: int) -> str:
        return str(max(1, min(cap, cpus // max(1, jobs))))

    slots = [
        Slot(f"cuda:{g}#{k}", {"CUDA_VISIBLE_DEVICES": g, "OMP_NUM_THREADS": share(len(gpus))})
        for g in gpus
        for k in range(jobs_per_gpu)
    ]
    if cpu_jobs is None:
        cpu_jobs = 0 if slots else max(1, cpus // 2)
    threads = share(cpu_jobs)
    slots += [
        Slot(f"cpu#{k}", {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})
        for k in range(cpu_jobs)
    ]
    return slots
