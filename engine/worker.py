"""The run worker: ``python -m engine --spec spec.json --out RUN_DIR``.

Reads a run spec, looks up its task family (:mod:`engine.tasks`) by the spec's ``task`` field and runs the
family's loop, which writes into ``RUN_DIR`` what it needs (the shared epoch loop of :mod:`engine.loop` writes
``checkpoint.pt``, readable with ``torch.load(..., weights_only=True)``). The worker itself writes ``spec.json``,
``events.jsonl`` (schema in :mod:`engine.events`, echoed on stdout), ``log.txt`` and ``result.json`` (status, run
hash, task, spec, metrics, parameter count, package versions, seconds, the ``device`` and ``device_name`` the run's
``start`` event named, plus the family's extra fields).

Packed seeds: ``python -m engine --spec A.json --out RUN_A --spec B.json --out RUN_B ...`` trains several runs in
one process, in turn epoch by epoch (each with its own random state, initialisation, batch order, optimiser,
checkpoint, events and result, exactly as alone); data the runs share (the dataset) is loaded once. Each folder is
locked, resumed, finished or refused on its own; a run that fails leaves the others going. The exit status is 0
when every run succeeded, 143 when any was cancelled, else the first failure's.

SIGTERM (or SIGINT, SIGHUP) stops at the next batch boundary: the checkpoint is saved with the exact position in
the epoch, a ``cancelled`` event is written and the worker exits with status 143. Starting the worker again on
the same ``RUN_DIR`` resumes from that checkpoint; a finished run is not redone, unless a file it or the runs that
depend on it read is missing or corrupt (:func:`engine.tasks.artefact_problem`).

One worker owns a run folder at a time (``worker.lock``); a folder that holds another run's ``spec.json`` is
refused. Each checkpoint is written with its size and SHA-256 (``checkpoint.json``) and the previous one is kept
as ``checkpoint.prev.pt``: a checkpoint that fails its check is moved aside (``*.corrupt-<time>``) and the run
resumes from the previous one, or from the start when there is none.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import signal
import sys
import time
import traceback
from collections.abc import Generator
from pathlib import Path
from typing import Any, TextIO

from engine.checkpoints import CHECKPOINT, PREVIOUS_CHECKPOINT, rng_state, set_rng_state
from engine.errors import GaptuiError
from engine.events import EXIT_CANCELLED, EXIT_CRASH, EXIT_INPUT, EXIT_NAN, EXIT_OK, EventWriter
from engine.files import FileLock, atomic_write_json, read_json
from engine.memory import flush_denormals, tune_allocator
from engine.tasks.registry import artefact_problem, family, load_spec, load_spec_file
from engine.tasks.run import Cancelled, RunContext, RunFailed, run_steps
from engine.tasks.spec import TaskSpec

#: Files of a run folder, by role (the worker's whole on-disk interface; the checkpoint files are the loop's).
LOCK = "worker.lock"
#: Every file a worker writes into its run folder (what ``train --out --force`` may replace).
RUN_FILES = (
    "spec.json",
    "events.jsonl",
    "log.txt",
    "stderr.txt",
    "result.json",
    CHECKPOINT,
    "checkpoint.json",
    PREVIOUS_CHECKPOINT,
    "checkpoint.prev.json",
    LOCK,
)
#: Set (to anything) in a worker's environment to stop it, with a checkpoint, when its parent process dies.
ENV_STOP_WITH_PARENT = "GAPTUI_STOP_WITH_PARENT"
#: Temporary files a worker that was killed may leave; the next worker on the folder removes them.
TEMPORARY = (".checkpoint.pt.tmp", ".result.json.tmp", ".spec.json.tmp")


class _Stop:
    """Set by SIGTERM / SIGINT / SIGHUP, or by the death of the parent when it asked for that (a foreground
    ``gaptui train`` killed outright); the training loop polls it between batches."""

    def __init__(self) -> None:
        self.requested = False
        self.signal: int | None = None
        self.parent = os.getppid() if os.environ.get(ENV_STOP_WITH_PARENT) else None

    def __call__(self) -> bool:
        if self.parent is not None and os.getppid() != self.parent:
            self.requested = True
        return self.requested

    def install(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            self.requested = True
            self.signal = signum

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, handler)


def versions() -> dict[str, str]:
    """Package versions that decide the numbers, for the reproducibility record; gaptui's names its code too
    (:func:`engine.provenance.code_version`: the commit or a hash of the sources).

    Read from the installed packages' metadata, not by importing them: importing ``torch_geometric`` pulls in
    ``torch._dynamo``, seconds of start-up that a worker whose family uses neither would pay at its end."""
    import importlib
    from importlib.metadata import PackageNotFoundError, version

    from engine.provenance import code_version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:  # not installed as a distribution (a source tree on the path)
            try:
                return str(importlib.import_module(name).__version__)
            except (ImportError, AttributeError):
                return "unknown"

    return {
        "python": platform.python_version(),
        "torch": of("torch"),
        "torch_geometric": of("torch_geometric"),
        "numpy": of("numpy"),
        "scipy": of("scipy"),
        "gaptui": code_version(),
    }


def _atomic_json(path: Path, obj: Any) -> None:
    atomic_write_json(path, obj, indent=2, sort_keys=True)


def check_run_folder(out: Path, spec: TaskSpec) -> None:
    """Refuse a run folder that is a file or holds another run's ``spec.json`` (never overwrite another run)."""
    if out.exists() and not out.is_dir():
        raise GaptuiError(f"run folder {out} exists and is a file, not a folder")
    existing = out / "spec.json"
    if not existing.exists():
        return
    raw = read_json(existing)
    try:
        other = load_spec(raw, where=str(existing)) if isinstance(raw, dict) else None
    except GaptuiError:
        other = None
    if other is None:
        raise GaptuiError(f"{existing} is not a readable run spec; choose another run folder")
    if other.run_id() != spec.run_id():
        raise GaptuiError(
            f"run folder {out} holds another run ({other.run_id()[:12]}: {family(other.task).describe(other)}); "
            "choose another folder (or pass --force to replace it)"
        )


class Run:
    """One worker execution over a run folder: the family's loop, framed by result.json and the final event."""

    def __init__(
        self,
        spec: TaskSpec,
        out: Path,
        events: EventWriter,
        log: TextIO,
        stop: _Stop,
        shared: dict[str, Any] | None = None,
    ) -> None:
        self.spec = spec
        self.out = out
        self.events = events
        self.log_fh = log
        self.stop = stop
        self.shared = {} if shared is None else shared
        self.started = time.perf_counter()
        #: The device the family's ``start`` event named (None before it): ``result.json`` records it.
        self.device: str | None = None

    def emit(self, event: str, **fields: Any) -> None:
        """The family's events, written as they come; the ``start`` event's ``device`` is kept for the result."""
        if event == "start" and fields.get("device"):
            self.device = str(fields["device"])
        self.events.emit(event, **fields)

    def device_fields(self) -> dict[str, str]:
        """``device`` and ``device_name`` of the device the run started on, for every family (one that writes its
        own keeps them); none for a run that failed before its ``start`` event."""
        if self.device is None:
            return {}
        from engine.hardware import device_fields

        try:
            import torch

            return device_fields(torch.device(self.device))
        except (RuntimeError, ValueError, AssertionError):  # not a torch device, or one this process cannot name
            return {"device": self.device}

    def log(self, text: str) -> None:
        self.log_fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
        self.log_fh.flush()

    def result(self, status: str, **fields: Any) -> dict[str, Any]:
        record = {
            "status": status,
            "run": self.spec.run_id(),
            "task": self.spec.task,
            "spec": self.spec.to_dict(),
            "versions": versions(),
            "seconds": round(time.perf_counter() - self.started, 3),
            **({} if "device_name" in fields else self.device_fields()),
            **fields,
        }
        _atomic_json(self.out / "result.json", record)
        return record

    def run(self) -> int:
        return run_steps(self.steps())

    def steps(self) -> Generator[None, None, int]:
        """The family's steps (yielding between epochs), ending in the worker's exit status for this run."""
        ctx = RunContext(self.out, self.emit, self.log, self.stop, self.shared)
        self.events.emit("progress", phase="preparing")  # reading data, computing inputs, building the model
        try:
            fam = family(self.spec.task)
            outcome = yield from fam.steps(self.spec, ctx)
            check_metrics(fam, outcome.metrics)
        except Cancelled as stop:
            self.events.emit("cancelled", **stop.where)
            where = ", ".join(f"{k} {v}" for k, v in stop.where.items())
            self.log(f"cancelled{' at ' + where if where else ''}; checkpoint saved")
            return EXIT_CANCELLED
        except RunFailed as exc:
            self.log(f"error: {exc}")
            self.result("failed", error=str(exc), **exc.fields)
            self.events.emit("error", message=str(exc), kind=exc.kind, **exc.event)
            return EXIT_NAN if exc.kind == "nan" else EXIT_CRASH
        metrics = outcome.metrics
        self.result("done", **outcome.extra, params=outcome.params, metrics=metrics)
        seconds = round(time.perf_counter() - self.started, 3)
        self.events.emit("done", metrics=metrics, params=outcome.params, seconds=seconds)
        return EXIT_OK


def check_metrics(fam: Any, metrics: Any) -> None:
    """A run is done only with a number for its family's default metric (what its tables rank by): one that ends
    without (no validation pairs, a loop that returned nothing) fails, rather than being filed done and ranked on
    nothing."""
    value = metrics.get(fam.default_metric) if isinstance(metrics, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return
    raise RunFailed(
        f"the run ended without a value for its metric {fam.default_metric} (got {value!r}): nothing to rank it by"
    )


class _Folder:
    """One run folder of a worker process (alone, or one of a pack): its lock, spec, events, log and steps.

    :meth:`open` returns the run's steps (a generator ending in its exit status), or None with :attr:`code` set
    when the run must not train (bad input, folder in use, already done).
    """

    def __init__(self, spec_path: Path, out: Path, stop: _Stop, quiet: bool, shared: dict[str, Any]) -> None:
        self.spec_path = spec_path
        self.out = out
        self.stop = stop
        self.quiet = quiet
        self.shared = shared
        self.code: int | None = None
        self.lock: FileLock | None = None
        self.events: EventWriter | None = None
        self.log: TextIO | None = None

    def open(self) -> Generator[None, None, int] | None:
        out = self.out
        try:
            if out.exists() and not out.is_dir():
                raise GaptuiError(f"run folder {out} exists and is a file, not a folder")
            out.mkdir(parents=True, exist_ok=True)
        except GaptuiError as exc:
            return self._refuse(str(exc))
        except OSError as exc:
            from engine.files import describe_os_error

            return self._refuse(describe_os_error(exc, "creating the run folder"))
        lock = FileLock(out / LOCK, f"worker of {out}")
        if not lock.acquire():
            # Another worker trains this folder: touch nothing (not even its events).
            return self._refuse(f"run folder {out} is in use by {lock.current_holder()}")
        self.lock = lock
        own_spec = out / "spec.json"
        try:
            spec = load_spec_file(self.spec_path)
            check_run_folder(out, spec)
        except GaptuiError as exc:
            if not own_spec.exists() or self.spec_path.resolve() == own_spec.resolve():
                with EventWriter(out / "events.jsonl", echo=None) as events:
                    events.emit("error", message=str(exc), kind="input")
            return self._refuse(str(exc))
        for name in TEMPORARY:
            (out / name).unlink(missing_ok=True)
        echo = None if self.quiet else sys.stdout
        self.events = EventWriter(out / "events.jsonl", echo=echo, common={"run": spec.run_id()})
        self.log = open(out / "log.txt", "a")  # noqa: SIM115 - closed by close(), after the last step
        return self._steps(spec)

    def _refuse(self, message: str) -> None:
        print(f"error: {message}", file=sys.stderr)
        self.code = EXIT_INPUT
        return None

    def _steps(self, spec: TaskSpec) -> Generator[None, None, int]:
        assert self.events is not None and self.log is not None
        log, events, out = self.log, self.events, self.out
        try:
            if self.spec_path.resolve() != (out / "spec.json").resolve():
                _atomic_json(out / "spec.json", spec.to_dict())
            if _finished(out, spec):
                log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} already done; nothing to do\n")
                return EXIT_OK
            return (yield from Run(spec, out, events, log, self.stop, self.shared).steps())
        except GaptuiError as exc:
            log.write(f"error: {exc}\n")
            events.emit("error", message=str(exc), kind="input")
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_INPUT
        except Exception as exc:  # noqa: BLE001 - any crash becomes an error event and a log entry
            log.write(traceback.format_exc())
            message = f"{type(exc).__name__}: {exc}".splitlines()[0]
            events.emit("error", message=message, kind="crash")
            print(f"error: {message}", file=sys.stderr)
            return EXIT_CRASH

    def close(self) -> None:
        if self.events is not None:
            self.events.close()
        if self.log is not None:
            self.log.close()
        if self.lock is not None:
            self.lock.release()


class _RandomState:
    """The random generators of one run of a pack (torch, CUDA, NumPy, ``random``), swapped in for its turn so
    that no run draws from another's stream (dropout, samplers): each run sees what it would see alone."""

    def __init__(self) -> None:
        self.saved: dict[str, Any] | None = None

    def __enter__(self) -> None:
        if self.saved is not None:
            set_rng_state(self.saved)

    def __exit__(self, *exc: object) -> None:
        self.saved = rng_state()


def interleave(runs: list[tuple[Generator[None, None, int], Any]]) -> list[int]:
    """Drive the steps of several runs in turn (one epoch each per round) until all have ended; their exit statuses.

    ``runs`` pairs each run's steps with a context manager entered around each of its turns (its random state).
    A run that ends (done, failed, cancelled) leaves the rotation; the others go on.
    """
    codes: list[int | None] = [None] * len(runs)
    while any(code is None for code in codes):
        for i, (steps, turn) in enumerate(runs):
            if codes[i] is not None:
                continue
            with turn:
                try:
                    next(steps)
                except StopIteration as end:
                    codes[i] = end.value
    return [int(code) for code in codes if code is not None]


def pack_status(codes: list[int]) -> int:
    """The exit status of a worker that ran several runs: 0 when all succeeded, 143 when any was cancelled (so a
    stopped pack reads as stopped), else the first failure's status. Each run's own outcome is in its folder."""
    if all(code == EXIT_OK for code in codes):
        return EXIT_OK
    if EXIT_CANCELLED in codes:
        return EXIT_CANCELLED
    return next(code for code in codes if code != EXIT_OK)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine",
        description="Run gaptui run specs: one (--spec --out), or several seeds packed into this process "
        "(--spec A --out A_DIR --spec B --out B_DIR ...), trained in turn epoch by epoch.",
    )
    parser.add_argument("--spec", required=True, type=Path, action="append", help="run spec JSON file")
    parser.add_argument(
        "--out", required=True, type=Path, action="append", help="run folder (created; resumed when it exists)"
    )
    parser.add_argument("--quiet", action="store_true", help="do not echo events on stdout")
    args = parser.parse_args(argv)
    if len(args.spec) != len(args.out):
        print(f"error: {len(args.spec)} --spec for {len(args.out)} --out: give one --out per --spec", file=sys.stderr)
        return EXIT_INPUT
    folders = [os.path.realpath(out) for out in args.out]
    if len(set(folders)) != len(folders):
        repeated = next(f for f in folders if folders.count(f) > 1)
        print(f"error: --out {repeated} is given twice: each run needs its own folder", file=sys.stderr)
        return EXIT_INPUT

    flush_denormals()  # first: the threads torch starts later copy the flag
    tune_allocator()
    stop = _Stop()
    stop.install()
    shared: dict[str, Any] = {}
    runs = [_Folder(spec, out, stop, args.quiet, shared) for spec, out in zip(args.spec, args.out, strict=True)]
    try:
        opened = [(run, run.open()) for run in runs]
        active = [(run, steps) for run, steps in opened if steps is not None]
        if len(runs) == 1:
            for run, steps in active:
                run.code = run_steps(steps)
        else:
            codes = interleave([(steps, _RandomState()) for _, steps in active])
            for (run, _), code in zip(active, codes, strict=True):
                run.code = code
    finally:
        for run in runs:
            run.close()
    return pack_status([EXIT_CRASH if run.code is None else run.code for run in runs])


def _finished(out: Path, spec: TaskSpec) -> bool:
    """Done, with every file the run and its dependants read intact (a deleted checkpoint is trained again)."""
    return not artefact_problem(spec, out, dependants=True)
