"""Device slots: where worker processes run (one GPU share or a group of CPU cores each), GPU detection, and the
slots of ``--gpus``/``--jobs-per-gpu``/``--cpu-jobs``."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from engine.errors import GaptuiError
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


def parse_gpus(text: str | None) -> list[str] | None:
    """``--gpus``: ``None``/``auto`` = every visible GPU, ``none``/empty = CPU only, else ``0,1``."""
    if text is None or text == "auto":
        return None
    if text in ("", "none"):
        return []
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    for g in gpus:
        if ascii_count(g) is None:
            raise GaptuiError(f"--gpus '{text}': expected a comma-separated list of GPU indices like 0,1 (or none)")
    return gpus


def slots_for(gpus: list[str] | None, jobs_per_gpu: int = 1, cpu_jobs: int | None = None) -> list[Slot]:
    """The scheduler slots for these settings (may run ``nvidia-smi``); GaptuiError when there are none."""
    if jobs_per_gpu < 1 or (cpu_jobs is not None and cpu_jobs < 0):
        raise GaptuiError("--jobs-per-gpu must be >= 1 and --cpu-jobs >= 0")
    if gpus:
        visible = detect_gpus()
        missing = [g for g in gpus if g not in visible]
        if missing:
            have = f"GPUs {', '.join(visible)}" if visible else "no GPU"
            raise GaptuiError(
                f"--gpus {','.join(gpus)}: GPU {', '.join(missing)} is not on this machine (it has {have}); "
                "--gpus none runs on the CPU"
            )
    slots = make_slots(gpus, jobs_per_gpu, cpu_jobs)
    if not slots:
        raise GaptuiError("no slot to run on: --gpus none needs --cpu-jobs >= 1")
    return slots
