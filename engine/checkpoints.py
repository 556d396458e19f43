"""A run's checkpoint: written atomically with its fingerprint, the previous one kept, read back past a corrupt
file, and the resume of a run from it (:meth:`Checkpoints.resume`).

The shared epoch loop (:func:`engine.loop.epoch_steps`) saves one after every epoch and when it is stopped, and
resumes from it at the exact batch: the checkpoint holds the loop's position, the state of every part of the task
(model, optimiser, scheduler), the task's own fields, the random generators (torch, CUDA, NumPy, ``random``) and
the precision the run trains in.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.files import atomic_write_json, fingerprint, mismatch, move_aside, read_json

#: Version of the checkpoint layout; a newer one is refused with one line (a checkpoint without ``format`` is 1).
CHECKPOINT_FORMAT = 1
#: The checkpoint files of a run folder.
CHECKPOINT = "checkpoint.pt"
PREVIOUS_CHECKPOINT = "checkpoint.prev.pt"


def rng_state() -> dict[str, Any]:
    """The process's random generators (torch, CUDA when initialised, NumPy, ``random``), in a form that
    ``torch.load(..., weights_only=True)`` reads back."""
    import random

    import numpy as np
    import torch

    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
        "numpy": [str(name), torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss), gauss],
        "random": [version, list(internal), gauss_next],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    import random

    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(gauss)))
    version, internal, gauss_next = state["random"]
    random.setstate((version, tuple(internal), gauss_next))


@dataclass
class Resumed:
    """A checkpoint :meth:`Checkpoints.resume` restored: the dict as loaded and the precision it was written in."""

    checkpoint: dict[str, Any]
    precision: str

    @property
    def state(self) -> dict[str, Any]:
        """The loop's position (``epoch``, ``batch_in_epoch``, ``step``, the epoch's running sums)."""
        return dict(self.checkpoint["state"])

    @property
    def metrics(self) -> dict[str, float]:
        return dict(self.checkpoint.get("metrics", {}))

    def restore_rng(self) -> None:
        """Set the random generators to what they were when the checkpoint was written."""
        if self.checkpoint.get("rng") is not None:
            set_rng_state(self.checkpoint["rng"])


class Checkpoints:
    """The run's checkpoint, its fingerprint and the previous one; loading falls back past corrupt files."""

    def __init__(self, out: Path, log: Callable[[str], None]) -> None:
        self.path = Path(out) / CHECKPOINT
        self.previous = Path(out) / PREVIOUS_CHECKPOINT
        self.log = log

    @staticmethod
    def sums(path: Path) -> Path:
        return path.with_suffix(".json")

    def save(self, payload: dict[str, Any]) -> None:
        """Write ``payload`` with ``torch.save``; the current checkpoint becomes the previous one."""
        import torch

        tmp = self.path.with_name(f".{self.path.name}.tmp")
        torch.save(payload, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        sums = fingerprint(tmp)
        # The order keeps one consistent (file, fingerprint) pair at every instant: a file without its
        # fingerprint is checked by loading it instead.
        if self.path.exists():
            if self.sums(self.path).exists():
                os.replace(self.sums(self.path), self.sums(self.previous))
            else:
                self.sums(self.previous).unlink(missing_ok=True)
            os.replace(self.path, self.previous)
        os.replace(tmp, self.path)
        atomic_write_json(self.sums(self.path), sums, indent=2, sort_keys=True)

    def load(self, device: Any) -> dict[str, Any] | None:
        """The newest checkpoint that passes its check, or None; corrupt ones are moved aside with a log line."""
        for path in (self.path, self.previous):
            ckpt = self._load_checked(path, device)
            if ckpt is not None:
                if path == self.previous:
                    self.log(f"resuming from the previous checkpoint {path.name}")
                return ckpt
        return None

    def resume(self, run: str, parts: dict[str, Any], precision: str, explicit: bool, device: Any) -> Resumed | None:
        """Restore the newest good checkpoint of run ``run``: every part's state (``parts``, by name) and the
        random generators; None when there is none. A checkpoint resumes in the precision it was written in: one
        the run asks for ``explicit``-ly (not ``auto``) and that differs from ``precision`` is refused, as are a
        checkpoint of another run, of a newer layout or without a part's state (one :class:`GaptuiError` line)."""
        ckpt = self.load(device)
        if ckpt is None:
            return None
        where = self.path
        written = str(ckpt.get("precision", "fp32"))
        if written != precision and explicit:
            raise GaptuiError(
                f"{where} was written in {written} precision and this run asks for {precision}; "
                f"run it with precision = {written} or use a fresh run folder"
            )
        if written != precision:
            self.log(f"resuming in {written} precision, the checkpoint's")
        if int(ckpt.get("format", 1)) > CHECKPOINT_FORMAT:
            raise GaptuiError(
                f"{where} has checkpoint format {ckpt.get('format')}, newer than this gaptui reads "
                f"({CHECKPOINT_FORMAT}); upgrade gaptui or use a fresh run folder"
            )
        if ckpt.get("run", run) != run:
            raise GaptuiError(f"{where} belongs to another run spec; use a fresh --out folder")
        for name, part in parts.items():
            if name not in ckpt:
                raise GaptuiError(f"{where} holds no {name} state; delete it to train the run from the start")
            part.load_state_dict(ckpt[name])
        return Resumed(ckpt, written)

    def save_run(self, run: str, precision: str, state: dict[str, Any], metrics: dict[str, float],
                 parts: dict[str, Any], fields: dict[str, Any]) -> None:  # fmt: skip
        """Save where run ``run`` stands: its ``state`` and ``metrics``, the task's own ``fields``, the random
        generators and every part's state, in the layout :meth:`resume` reads."""
        self.save(
            {
                "format": CHECKPOINT_FORMAT,
                "run": run,
                "precision": precision,
                **fields,
                "state": state,
                "metrics": metrics,
                "rng": rng_state(),
                **{name: part.state_dict() for name, part in parts.items()},
            }
        )

    def _load_checked(self, path: Path, device: Any) -> dict[str, Any] | None:
        if not path.exists():
            return None
        ckpt, problem = check_checkpoint(path, device)
        if problem:
            aside = move_aside(path)
            if self.sums(path).exists():
                os.replace(self.sums(path), aside.with_name(aside.name + ".json"))
            message = f"checkpoint {path} is corrupt ({problem}); moved aside to {aside.name}"
            self.log(f"warning: {message}")
            print(f"warning: {message}", file=sys.stderr)
            return None
        return ckpt


def _legacy(ckpt: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of the property study's own loop before the shared one (``model``, ``optimizer``, ``epoch``,
    ``last``; written at epoch ends) in the shared layout; any other dict as it is."""
    if "state" not in ckpt and {"model", "optimizer", "epoch", "last"} <= set(ckpt):
        return {
            "state": {"epoch": int(ckpt["epoch"])},
            "metrics": dict(ckpt["last"]),
            "model": ckpt["model"],
            "optimizer": ckpt["optimizer"],
        }
    return ckpt


def check_checkpoint(path: Path, device: Any = "cpu") -> tuple[dict[str, Any] | None, str]:
    """``(checkpoint, "")`` when ``path`` matches its fingerprint (``<stem>.json``, when written) and loads as a
    gaptui checkpoint; ``(None, why)`` otherwise."""
    import torch

    expected = read_json(Checkpoints.sums(path))
    problem = mismatch(path, expected) if isinstance(expected, dict) else ""
    if problem:
        return None, problem
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint is treated as corrupt
        return None, f"unreadable ({type(exc).__name__})"
    ckpt = _legacy(ckpt) if isinstance(ckpt, dict) else ckpt
    if not isinstance(ckpt, dict) or "state" not in ckpt:
        return None, "not a gaptui checkpoint"
    return ckpt, ""


def read_checkpoint(path: Path, device: Any = "cpu") -> dict[str, Any]:
    """The checkpoint at ``path`` after its check; one-line :class:`GaptuiError` when it is corrupt."""
    ckpt, problem = check_checkpoint(path, device)
    if ckpt is None:
        raise GaptuiError(f"checkpoint {path} is corrupt ({problem}); train the run again to get its model back")
    return ckpt
