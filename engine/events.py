"""The worker's event stream: the one interface between a training worker and whoever watches it.

A worker appends one JSON object per line to ``<run dir>/events.jsonl`` and prints the same line on stdout.
Every event has:

=========  ===========================================================================================
key        meaning
=========  ===========================================================================================
``v``      schema version (:data:`SCHEMA_VERSION`); readers skip events of a newer major version
``event``  one of ``progress``, ``start``, ``epoch``, ``eval``, ``done``, ``cancelled``, ``error``
``t``      wall-clock time, seconds since the epoch (float)
``run``    the run's spec hash (on every event written once the worker has read the spec; a worker that
           trains packed seeds echoes several runs' events on one stdout)
=========  ===========================================================================================

and, by kind:

- ``progress``: where a run is between the events below, for whoever shows it: ``phase`` ``preparing`` (the
  worker started and prepares the run: reads its data, computes its inputs, builds its model; before ``start``;
  ``what``, when a family says, names the step: ``positional inputs rwpe:16 (train)``), or ``training`` with
  ``epoch`` (1-based, in progress), ``batch`` (batches of it done) and ``batches`` (per epoch), at most every
  :data:`PROGRESS_EVERY` seconds within an epoch. Nothing else reads it.
- ``start``: ``run`` (spec hash), ``model``, ``params`` (trainable parameter count), ``width``, ``device``,
  ``dataset`` (dataset id), ``n_train``, ``n_val``, ``epochs``, ``steps_per_epoch``, ``precision`` (``fp32`` or
  ``bf16``, what the run trains in), ``resumed_from`` (the epoch, batch and step a resumed run continues from,
  or null), ``pid``.
- ``epoch``: ``epoch`` (1-based, completed), ``step`` (optimiser steps so far), ``train_loss`` (mean over real
  nodes), ``lr`` (after the epoch's last step), ``seconds`` (the epoch's wall time), ``val_acc`` (LAP accuracy
  when the epoch was evaluated, else null).
- ``eval``: ``epoch``, ``val_lap_acc``, ``val_argmax_acc``, ``val_top{k}_acc`` for each k, ``val_loss``,
  ``seconds`` (evaluation wall time).
- ``done``: ``metrics`` (the final ``eval`` metrics plus ``train_loss``), ``params``, ``seconds`` (whole run).
- ``cancelled``: ``epoch``, ``step`` and ``batch`` (of the next epoch) reached; the checkpoint was saved and the
  run can resume there.
- ``error``: ``message`` (one line), ``kind`` (``input``: bad spec or data, exit 2; ``nan``: non-finite loss,
  exit 3, with the ``epoch`` and ``step`` that made it; ``crash``: anything else, exit 1).

Accuracies are shares in [0, 1] of all validation nodes (pooled over pairs).

Downstream GAPE runs (:mod:`engine.gape.train`) use the same kinds: ``start`` adds ``pe`` (the positional encoding)
with ``model`` = ``transformer``; ``epoch`` has ``val_mae`` (null when not evaluated) and ``val_acc`` absent;
``eval`` has ``val_mae``, ``test_mae`` (when the dataset has a test split) and ``train_loss``, all mean absolute
errors in the target's units; ``done``'s ``metrics`` add ``best_val_mae``, ``best_epoch`` and
``test_mae_at_best``. Property study runs (:mod:`engine.properties.training`): ``start`` has ``model`` (the
pooling), ``params``, ``device``, ``property``, ``dimension``; ``epoch`` has ``train_acc`` and no validation field;
one ``eval`` after training has ``accuracy`` (per test size), ``u_score`` and ``seconds``. The fields every family
shares come from the shared epoch loop (:mod:`engine.loop`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

SCHEMA_VERSION = 1
KINDS = ("progress", "start", "epoch", "eval", "done", "cancelled", "error")
#: Seconds between two ``progress`` events within an epoch (a batch ends before the next is said).
PROGRESS_EVERY = 2.0

#: Exit codes of ``python -m engine``.
EXIT_OK = 0
EXIT_CRASH = 1
EXIT_INPUT = 2
EXIT_NAN = 3
EXIT_CANCELLED = 143


class EventWriter:
    """Appends events to ``events.jsonl`` (flushed per line) and echoes them to ``stdout``.

    A file whose last line was torn by a killed writer gets a newline first, so the torn fragment stays one bad
    line (which readers skip) instead of swallowing the next event. When the echo's reader goes away (broken
    pipe), echoing stops quietly and the file goes on.
    """

    def __init__(self, path: Path, echo: TextIO | None = sys.stdout, common: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        #: Fields written into every event (the run's hash).
        self.common = dict(common or {})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a+b", buffering=0)  # noqa: SIM115 - lives as long as the writer
        if self._fh.tell() > 0:
            self._fh.seek(-1, os.SEEK_END)
            if self._fh.read(1) != b"\n":
                self._fh.write(b"\n")
        self._echo = echo

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def emit(self, name: str, /, **fields: Any) -> dict[str, Any]:
        """Write event ``name`` (one of :data:`KINDS`) with ``fields``; returns the event as written."""
        if name not in KINDS:
            raise ValueError(f"unknown event kind {name!r}")
        event = {"v": SCHEMA_VERSION, "event": name, "t": time.time(), **self.common, **fields}
        line = json.dumps(event, default=_jsonable)
        self._fh.write((line + "\n").encode())
        if name in ("done", "cancelled", "error"):
            os.fsync(self._fh.fileno())
        if self._echo is not None:
            try:
                self._echo.write(line + "\n")
                self._echo.flush()
            except BrokenPipeError:
                self._silence_echo()
        return event

    def _silence_echo(self) -> None:
        # Point the echo's descriptor at /dev/null so that the interpreter's final flush cannot fail either.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._echo.fileno())  # type: ignore[union-attr]
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
        self._echo = None

    def close(self) -> None:
        self._fh.close()


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_events(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Complete events from byte ``offset`` on, and the offset to continue from (a torn last line waits)."""
    events: list[dict[str, Any]] = []
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return events, offset
    end = data.rfind(b"\n") + 1
    for raw in data[:end].splitlines():
        try:
            event = json.loads(raw)
        except ValueError:  # a torn or garbled line (also invalid UTF-8): skipped
            continue
        if isinstance(event, dict) and isinstance(event.get("v", 0), int) and event.get("v", 0) <= SCHEMA_VERSION:
            events.append(event)
    return events, offset + end


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    yield from read_events(path)[0]
