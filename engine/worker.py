"""The run worker: ``python -m engine --spec spec.json --out RUN_DIR``.

Reads a :class:`~engine.spec.RunSpec`, builds (or finds) its dataset, trains and evaluates, and writes into
``RUN_DIR``: ``spec.json``, ``events.jsonl`` (schema in :mod:`engine.events`, echoed on stdout), ``log.txt``,
``checkpoint.pt`` (readable with ``torch.load(..., weights_only=True)``) and ``result.json``.

SIGTERM (or SIGINT) stops at the next batch boundary: the checkpoint is saved with the exact position in the
epoch, a ``cancelled`` event is written and the worker exits with status 143. Starting the worker again on the
same ``RUN_DIR`` resumes from that checkpoint; a finished run is not redone.
"""

from __future__ import annotations

import argparse
import json
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
from engine.spec import RunSpec

CHECKPOINT_FORMAT = 1


class _Stop:
    """Set by SIGTERM / SIGINT; the training loop polls it between batches."""

    def __init__(self) -> None:
        self.requested = False
        self.signal: int | None = None

    def __call__(self) -> bool:
        return self.requested

    def install(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            self.requested = True
            self.signal = signum

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


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
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
        scores = laplacian_scores(val, k=k, ks=self.spec.topk)
        metrics = metrics_of(scores, float("nan"))
        metrics.pop("val_loss")
        self.events.emit("eval", epoch=0, seconds=round(time.perf_counter() - t0, 3), **metrics)
        self.log(f"laplacian baseline (k={k}): val LAP accuracy {metrics['val_lap_acc']:.4f}")
        self.result("done", dataset=dataset.id, model="laplacian", params=0, width=k, epochs=0, metrics=metrics)
        self.events.emit("done", metrics=metrics, params=0, seconds=round(time.perf_counter() - self.started, 3))
        return EXIT_OK

    def run_training(self, dataset: Any) -> int:
        import torch

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
        ckpt_path = self.out / "checkpoint.pt"
        if ckpt_path.exists():
            ckpt = torch.load(ckpt_path, map_location=device, weights_only=True)
            if ckpt.get("run") != spec.hash():
                raise GaptuiError(f"{ckpt_path} belongs to another run spec; use a fresh --out folder")
            model.load_state_dict(ckpt["model"])
            opt.load_state_dict(ckpt["optimizer"])
            sched.load_state_dict(ckpt["scheduler"])
            state = TrainState(**ckpt["state"])
            metrics = dict(ckpt.get("metrics", {}))
            resumed_from = {"epoch": state.epoch, "batch": state.batch_in_epoch, "step": state.step}
            self.log(f"resuming from epoch {state.epoch}, batch {state.batch_in_epoch} (step {state.step})")

        def save_checkpoint() -> None:
            tmp = ckpt_path.with_name(".checkpoint.pt.tmp")
            torch.save(
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
                },
                tmp,
            )
            os.replace(tmp, ckpt_path)

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
                if epoch % spec.eval_every == 0 or epoch == spec.epochs:
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
        metrics["train_loss"] = metrics.get("train_loss", float("nan"))
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
    out.mkdir(parents=True, exist_ok=True)
    stop = _Stop()
    stop.install()
    events = EventWriter(out / "events.jsonl", echo=None if args.quiet else sys.stdout)
    with open(out / "log.txt", "a") as log:
        try:
            spec = RunSpec.from_file(args.spec)
            if args.spec.resolve() != (out / "spec.json").resolve():
                _atomic_json(out / "spec.json", spec.to_dict())
            done = _finished(out, spec)
            if done:
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
    try:
        result = json.loads((out / "result.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    return result.get("status") == "done" and result.get("run") == spec.hash()
