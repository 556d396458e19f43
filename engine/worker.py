"""The run worker: ``python -m engine --spec spec.json --out RUN_DIR``.

Reads a :class:`~engine.spec.RunSpec`, builds (or finds) its dataset, trains and evaluates, and writes into
``RUN_DIR``: ``spec.json``, ``events.jsonl`` (schema in :mod:`engine.events`, echoed on stdout), ``log.txt``,
``checkpoint.pt`` (readable with ``torch.load(..., weights_only=True)``) and ``result.json``.

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
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from engine.errors import GaptuiError
from engine.events import EXIT_CANCELLED, EXIT_CRASH, EXIT_INPUT, EXIT_NAN, EXIT_OK, EventWriter
from engine.files import FileLock, atomic_write_json, fingerprint, mismatch, move_aside, read_json
from engine.spec import RunSpec

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


def check_run_folder(out: Path, spec: RunSpec) -> None:
    """Refuse a run folder that is a file or holds another run's ``spec.json`` (never overwrite another run)."""
    if out.exists() and not out.is_dir():
        raise GaptuiError(f"run folder {out} exists and is a file, not a folder")
    existing = out / "spec.json"
    if not existing.exists():
        return
    raw = read_json(existing)
    try:
        other = RunSpec.from_dict(raw, where=str(existing)) if isinstance(raw, dict) else None
    except GaptuiError:
        other = None
    if other is None:
        raise GaptuiError(f"{existing} is not a readable run spec; choose another run folder")
    if other.hash() != spec.hash():
        raise GaptuiError(
            f"run folder {out} holds another run ({other.hash()[:12]}: {other.model} on {other.dataset['base']}); "
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
    """One worker execution over a run folder."""

    def __init__(self, spec: RunSpec, out: Path, events: EventWriter, log: TextIO, stop: _Stop) -> None:
        self.spec = spec
        self.out = out
        self.events = events
        self.log_fh = log
        self.stop = stop
        self.started = time.perf_counter()

    def log(self, text: str) -> None:
        self.log_fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
        self.log_fh.flush()

    # ------------------------------------------------------------------------------------------------ set-up

    def dataset(self) -> Any:
        from engine.datasets import build_dataset

        spec = self.spec
        datasets_dir = Path(spec.datasets_dir) if spec.datasets_dir else default_datasets_dir()
        raw = Path(spec.data_root) if spec.data_root else None
        dataset, built = build_dataset(spec.dataset_spec(), datasets_dir, raw)
        self.log(f"dataset {dataset.id} ({'built' if built else 'cached'}) at {dataset.path}")
        return dataset

    def out_dim(self, dataset: Any) -> int:
        from engine.sources import SOURCES

        return self.spec.out_dim or SOURCES.get(dataset.spec["base"]).embedding_dim

    def result(self, status: str, **fields: Any) -> dict[str, Any]:
        import torch

        from engine.training import resolve_device

        device = resolve_device(self.spec.device)
        record = {
            "status": status,
            "run": self.spec.hash(),
            "spec": self.spec.to_dict(),
            "device": str(device),
            "device_name": torch.cuda.get_device_name(device)
            if device.type == "cuda"
            else platform.processor() or platform.machine(),
            "versions": versions(),
            "seconds": round(time.perf_counter() - self.started, 3),
            **fields,
        }
        _atomic_json(self.out / "result.json", record)
        return record

    # ------------------------------------------------------------------------------------------------ runs

    def run(self) -> int:
        self.spec.check_memory()
        dataset = self.dataset()
        if self.spec.model == "laplacian":
            return self.run_laplacian(dataset)
        return self.run_training(dataset)

    def run_laplacian(self, dataset: Any) -> int:
        from engine.laplacian import laplacian_scores
        from engine.training import metrics_of

        k = self.out_dim(dataset)
        val = dataset.split("val")
        self.events.emit(
            "start",
            run=self.spec.hash(),
            model="laplacian",
            params=0,
            width=k,
            device="cpu",
            dataset=dataset.id,
            n_train=0,
            n_val=len(val),
            epochs=0,
            steps_per_epoch=0,
            resumed_from=None,
            pid=os.getpid(),
        )
        t0 = time.perf_counter()
        metrics: dict[str, float] = {}
        if len(val):  # without validation pairs there is no metric: it stays missing, never a 0 % score
            scores = laplacian_scores(val, k=k, ks=self.spec.topk)
            metrics = metrics_of(scores, float("nan"))
            metrics.pop("val_loss")
            self.events.emit("eval", epoch=0, seconds=round(time.perf_counter() - t0, 3), **metrics)
        self.log(f"laplacian baseline (k={k}): val LAP accuracy {metrics.get('val_lap_acc', float('nan')):.4f}")
        self.result("done", dataset=dataset.id, model="laplacian", params=0, width=k, epochs=0, metrics=metrics)
        self.events.emit("done", metrics=metrics, params=0, seconds=round(time.perf_counter() - self.started, 3))
        return EXIT_OK

    def run_training(self, dataset: Any) -> int:

        from engine import models
        from engine.evaluation import LapEvaluator
        from engine.training import (
            FEATURES,
            NonFiniteLoss,
            PairTensors,
            TrainState,
            evaluate,
            make_optimiser,
            metrics_of,
            resolve_device,
            seed_everything,
            train_epoch,
        )

        spec = self.spec
        device = resolve_device(spec.device)
        seed_everything(spec.seed)
        model = models.build(
            spec.model,
            out_dim=self.out_dim(dataset),
            budget=spec.budget,
            in_dim=FEATURES[spec.features],
            **spec.model_options(),
        ).to(device)
        params = models.count_parameters(model)
        train = PairTensors(dataset.split("train"), device)
        val = PairTensors(dataset.split("val"), device)
        steps_per_epoch = -(-len(train) // spec.batch_size)
        opt, sched = make_optimiser(model, spec.lr, spec.weight_decay, spec.epochs * steps_per_epoch, spec.warmup_steps)
        state = TrainState()
        metrics: dict[str, float] = {}
        resumed_from = None
        checkpoints = Checkpoints(self.out, self.log)
        ckpt = checkpoints.load(device)
        if ckpt is not None:
            if ckpt.get("run") != spec.hash():
                raise GaptuiError(f"{checkpoints.path} belongs to another run spec; use a fresh --out folder")
            model.load_state_dict(ckpt["model"])
            opt.load_state_dict(ckpt["optimizer"])
            sched.load_state_dict(ckpt["scheduler"])
            state = TrainState(**ckpt["state"])
            metrics = dict(ckpt.get("metrics", {}))
            resumed_from = {"epoch": state.epoch, "batch": state.batch_in_epoch, "step": state.step}
            self.log(f"resuming from epoch {state.epoch}, batch {state.batch_in_epoch} (step {state.step})")

        def save_checkpoint() -> None:
            checkpoints.save(
                {
                    "format": CHECKPOINT_FORMAT,
                    "run": spec.hash(),
                    "model_name": spec.model,
                    "width": int(getattr(model, "width", 0) or 0),
                    "params": params,
                    "in_dim": FEATURES[spec.features],
                    "out_dim": self.out_dim(dataset),
                    "features": spec.features,
                    "state": asdict(state),
                    "metrics": metrics,
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(),
                }
            )

        width = int(getattr(model, "width", 0) or 0)
        self.events.emit(
            "start",
            run=spec.hash(),
            model=spec.model,
            params=params,
            width=width,
            device=str(device),
            dataset=dataset.id,
            n_train=len(train),
            n_val=len(val),
            epochs=spec.epochs,
            steps_per_epoch=steps_per_epoch,
            resumed_from=resumed_from,
            pid=os.getpid(),
        )
        self.log(f"model {spec.model}: {params} parameters, width {width}, device {device}")
        train_loss = float("nan")
        with LapEvaluator(ks=spec.topk) as evaluator:
            while state.epoch < spec.epochs:
                t0 = time.perf_counter()
                try:
                    finished = train_epoch(
                        model,
                        train,
                        opt,
                        sched,
                        state,
                        batch_size=spec.batch_size,
                        seed=spec.seed,
                        clip=spec.clip,
                        clip_mode=spec.clip_mode,
                        features=spec.features,
                        should_stop=self.stop,
                    )
                except NonFiniteLoss as exc:
                    self.log(f"error: {exc}")
                    self.result("failed", dataset=dataset.id, model=spec.model, params=params, error=str(exc))
                    self.events.emit("error", message=str(exc), kind="nan", epoch=exc.epoch, step=exc.step)
                    return EXIT_NAN
                if not finished:
                    return self.cancel(save_checkpoint, state)
                epoch = state.epoch + 1
                train_loss = state.loss_sum / max(state.loss_nodes, 1)
                seconds = time.perf_counter() - t0
                val_acc = None
                # Without validation pairs there is no metric: it stays missing (never a 0 % that could rank).
                if len(val) and (epoch % spec.eval_every == 0 or epoch == spec.epochs):
                    t1 = time.perf_counter()
                    scores, val_loss = evaluate(model, val, spec.batch_size, evaluator, spec.features)
                    metrics = {**metrics_of(scores, val_loss), "train_loss": train_loss}
                    val_acc = metrics["val_lap_acc"]
                    self.events.emit("eval", epoch=epoch, seconds=round(time.perf_counter() - t1, 4), **metrics)
                state.epoch, state.batch_in_epoch, state.loss_sum, state.loss_nodes = epoch, 0, 0.0, 0
                save_checkpoint()
                lr = opt.param_groups[0]["lr"]
                self.events.emit(
                    "epoch",
                    epoch=epoch,
                    step=state.step,
                    train_loss=train_loss,
                    lr=lr,
                    seconds=round(seconds, 4),
                    val_acc=val_acc,
                )
                acc = f" val LAP acc {val_acc:.4f}" if val_acc is not None else ""
                self.log(f"epoch {epoch}/{spec.epochs} loss {train_loss:.4f}{acc} lr {lr:.2e} {seconds:.2f}s")
                if self.stop():
                    return self.cancel(save_checkpoint, state)
        metrics.setdefault("train_loss", train_loss)
        self.result(
            "done",
            dataset=dataset.id,
            model=spec.model,
            params=params,
            width=width,
            epochs=spec.epochs,
            metrics=metrics,
        )
        self.events.emit("done", metrics=metrics, params=params, seconds=round(time.perf_counter() - self.started, 3))
        self.log(f"done: val LAP accuracy {metrics.get('val_lap_acc', float('nan')):.4f}")
        return EXIT_OK

    def cancel(self, save_checkpoint: Any, state: Any) -> int:
        save_checkpoint()
        self.events.emit("cancelled", epoch=state.epoch, step=state.step, batch=state.batch_in_epoch)
        self.log(f"cancelled at epoch {state.epoch}, batch {state.batch_in_epoch}; checkpoint saved")
        return EXIT_CANCELLED


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
        spec = RunSpec.from_file(args.spec)
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


def _finished(out: Path, spec: RunSpec) -> bool:
    result = read_json(out / "result.json")
    return isinstance(result, dict) and result.get("status") == "done" and result.get("run") == spec.hash()
