"""The run worker: ``python -m engine --spec spec.json --out RUN_DIR``.

Reads a run spec, looks up its task family (:mod:`engine.tasks`) by the spec's ``task`` field and runs the
family's loop, which writes into ``RUN_DIR`` what it needs (alignment: ``checkpoint.pt``, readable with
``torch.load(..., weights_only=True)``, through :class:`Checkpoints`). The worker itself writes ``spec.json``,
``events.jsonl`` (schema in :mod:`engine.events`, echoed on stdout), ``log.txt`` and ``result.json`` (status, run
hash, task, spec, metrics, parameter count, package versions, seconds, plus the family's extra fields).

SIGTERM (or SIGINT, SIGHUP) stops at the next batch boundary: the checkpoint is saved with the exact position in
the epoch, a ``cancelled`` event is written and the worker exits with status 143. Starting the worker again on
the same ``RUN_DIR`` resumes from that checkpoint; a finished run is not redone.

One worker owns a run folder at a time (``worker.lock``); a folder that holds another run's ``spec.json`` is
refused. Each checkpoint is written with its size and SHA-256 (``checkpoint.json``) and the previous one is kept
as ``checkpoint.prev.pt``: a checkpoint that fails its check is moved aside (``*.corrupt-<time>``) and the run
resumes from the previous one, or from the start when there is none.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from engine.errors import GaptuiError
from engine.events import EXIT_CANCELLED, EXIT_CRASH, EXIT_INPUT, EXIT_NAN, EXIT_OK, EventWriter
from engine.files import FileLock, atomic_write_json, fingerprint, mismatch, move_aside, read_json
from engine.tasks import Cancelled, RunContext, RunFailed, TaskSpec, family, load_spec, load_spec_file

CHECKPOINT_FORMAT = 1
#: Files of a run folder, by role (the worker's whole on-disk interface).
CHECKPOINT = "checkpoint.pt"
PREVIOUS_CHECKPOINT = "checkpoint.prev.pt"
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
    """Package versions that decide the numbers, for the reproducibility record."""
    from importlib.metadata import PackageNotFoundError, version

    import numpy
    import scipy
    import torch
    import torch_geometric

    try:
        gaptui_version = version("gaptui")
    except PackageNotFoundError:
        gaptui_version = "unknown"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "gaptui": gaptui_version,
    }


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``), else the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def default_datasets_dir() -> Path:
    """Same default as the ``gaptui`` CLI: ``$GAPTUI_WORKSPACE/datasets`` or ``./gaptui-runs/datasets``."""
    return Path(os.environ.get("GAPTUI_WORKSPACE") or "gaptui-runs") / "datasets"


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
    if other.hash() != spec.hash():
        raise GaptuiError(
            f"run folder {out} holds another run ({other.hash()[:12]}: {family(other.task).describe(other)}); "
            "choose another folder (or pass --force to replace it)"
        )


class Checkpoints:
    """The run's checkpoint, its fingerprint and the previous one; loading falls back past corrupt files."""

    def __init__(self, out: Path, log: Any) -> None:
        self.path = out / CHECKPOINT
        self.previous = out / PREVIOUS_CHECKPOINT
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
        _atomic_json(self.sums(self.path), sums)

    def load(self, device: Any) -> dict[str, Any] | None:
        """The newest checkpoint that passes its check, or None; corrupt ones are moved aside with a log line."""
        for path in (self.path, self.previous):
            ckpt = self._load_checked(path, device)
            if ckpt is not None:
                if path == self.previous:
                    self.log(f"resuming from the previous checkpoint {path.name}")
                return ckpt
        return None

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
    if not isinstance(ckpt, dict) or "state" not in ckpt:
        return None, "not a gaptui checkpoint"
    return ckpt, ""


def read_checkpoint(path: Path, device: Any = "cpu") -> dict[str, Any]:
    """The checkpoint at ``path`` after its check; one-line :class:`GaptuiError` when it is corrupt."""
    ckpt, problem = check_checkpoint(path, device)
    if ckpt is None:
        raise GaptuiError(f"checkpoint {path} is corrupt ({problem}); train the run again to get its model back")
    return ckpt


class Run:
    """One worker execution over a run folder: the family's loop, framed by result.json and the final event."""

    def __init__(self, spec: TaskSpec, out: Path, events: EventWriter, log: TextIO, stop: _Stop) -> None:
        self.spec = spec
        self.out = out
        self.events = events
        self.log_fh = log
        self.stop = stop
        self.started = time.perf_counter()

    def log(self, text: str) -> None:
        self.log_fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
        self.log_fh.flush()

    def result(self, status: str, **fields: Any) -> dict[str, Any]:
        record = {
            "status": status,
            "run": self.spec.hash(),
            "task": self.spec.task,
            "spec": self.spec.to_dict(),
            "versions": versions(),
            "seconds": round(time.perf_counter() - self.started, 3),
            **fields,
        }
        _atomic_json(self.out / "result.json", record)
        return record

    def run(self) -> int:
        ctx = RunContext(self.out, self.events.emit, self.log, self.stop)
        try:
            outcome = family(self.spec.task).run(self.spec, ctx)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Run one gaptui run spec.")
    parser.add_argument("--spec", required=True, type=Path, help="run spec JSON file")
    parser.add_argument("--out", required=True, type=Path, help="run folder (created; resumed when it exists)")
    parser.add_argument("--quiet", action="store_true", help="do not echo events on stdout")
    args = parser.parse_args(argv)

    out: Path = args.out
    stop = _Stop()
    stop.install()
    try:
        if out.exists() and not out.is_dir():
            raise GaptuiError(f"run folder {out} exists and is a file, not a folder")
        out.mkdir(parents=True, exist_ok=True)
    except GaptuiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as exc:
        from engine.files import describe_os_error

        print(f"error: {describe_os_error(exc, 'creating the run folder')}", file=sys.stderr)
        return EXIT_INPUT
    lock = FileLock(out / LOCK, f"worker of {out}")
    if not lock.acquire():
        # Another worker trains this folder: touch nothing (not even its events).
        print(f"error: run folder {out} is in use by {lock.current_holder()}", file=sys.stderr)
        return EXIT_INPUT
    try:
        return _run_locked(args, out, stop)
    finally:
        lock.release()


def _run_locked(args: argparse.Namespace, out: Path, stop: _Stop) -> int:
    own_spec = out / "spec.json"
    try:
        spec = load_spec_file(args.spec)
        check_run_folder(out, spec)
    except GaptuiError as exc:
        if not own_spec.exists() or args.spec.resolve() == own_spec.resolve():
            with EventWriter(out / "events.jsonl", echo=None) as events:
                events.emit("error", message=str(exc), kind="input")
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    for name in TEMPORARY:
        (out / name).unlink(missing_ok=True)
    events = EventWriter(out / "events.jsonl", echo=None if args.quiet else sys.stdout)
    with open(out / "log.txt", "a") as log:
        try:
            if args.spec.resolve() != own_spec.resolve():
                _atomic_json(own_spec, spec.to_dict())
            if _finished(out, spec):
                log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} already done; nothing to do\n")
                return EXIT_OK
            return Run(spec, out, events, log, stop).run()
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
        finally:
            events.close()


def _finished(out: Path, spec: TaskSpec) -> bool:
    result = read_json(out / "result.json")
    return isinstance(result, dict) and result.get("status") == "done" and result.get("run") == spec.hash()
