"""The alignment worker loop: the training loop of one run, or the training-free Laplacian baseline."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine.alignment.preset import BASELINE
from engine.alignment.spec import RunSpec
from engine.errors import GaptuiError
from engine.tasks import (
    Cancelled,
    Outcome,
    RunContext,
    RunFailed,
)

# ------------------------------------------------------------------------------------------------ worker loop


def dataset_dirs(spec: RunSpec) -> tuple[Path, Path | None]:
    from engine.worker import default_datasets_dir

    datasets_dir = Path(spec.datasets_dir) if spec.datasets_dir else default_datasets_dir()
    return datasets_dir, Path(spec.data_root) if spec.data_root else None


def device_fields(spec: RunSpec) -> dict[str, Any]:
    import torch

    from engine.alignment.training import resolve_device
    from engine.worker import cpu_name

    device = resolve_device(spec.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {"device": str(device), "device_name": name}


class AlignmentRun:
    """One alignment worker execution: the training loop, or the Laplacian baseline."""

    def __init__(self, spec: RunSpec, ctx: RunContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.started = time.perf_counter()

    def dataset(self) -> Any:
        from engine.alignment.datasets import build_dataset

        # The seeds of a pack share one dataset: it is loaded once per worker process.
        key = "alignment-dataset:" + json.dumps(self.spec.dataset_spec().canonical(), sort_keys=True)
        if key in self.ctx.shared:
            dataset = self.ctx.shared[key]
            self.ctx.log(f"dataset {dataset.id} (loaded by another run of this worker) at {dataset.path}")
            return dataset
        dataset, built = build_dataset(self.spec.dataset_spec(), *dataset_dirs(self.spec))
        self.ctx.log(f"dataset {dataset.id} ({'built' if built else 'cached'}) at {dataset.path}")
        self.ctx.shared[key] = dataset
        return dataset

    def pairs(self, dataset: Any, split: str, device: Any) -> Any:
        """The split's tensors on ``device``, built once per worker process (read-only during training)."""
        from engine.alignment.training import PairTensors

        key = f"alignment-pairs:{dataset.id}:{split}:{device}"
        if key not in self.ctx.shared:
            self.ctx.shared[key] = PairTensors(dataset.split(split), device)
        return self.ctx.shared[key]

    def out_dim(self, dataset: Any) -> int:
        from engine.sources import SOURCES

        return self.spec.out_dim or SOURCES.get(dataset.spec["base"]).embedding_dim

    def steps(self) -> Generator[None, None, Outcome]:
        """The run, yielding after each epoch (the turn of the next run of a pack)."""
        self.spec.check_memory()
        dataset = self.dataset()
        if self.spec.model == BASELINE:
            return self.run_laplacian(dataset)
        return (yield from self.run_training(dataset))

    def run_laplacian(self, dataset: Any) -> Outcome:
        from engine.alignment.training import metrics_of
        from engine.laplacian import laplacian_scores

        k = self.out_dim(dataset)
        val = dataset.split("val")
        self.ctx.emit(
            "start",
            run=self.spec.hash(),
            model=BASELINE,
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
            self.ctx.emit("eval", epoch=0, seconds=round(time.perf_counter() - t0, 3), **metrics)
        self.ctx.log(f"laplacian baseline (k={k}): val LAP accuracy {metrics.get('val_lap_acc', float('nan')):.4f}")
        extra = {**device_fields(self.spec), "dataset": dataset.id, "model": BASELINE, "width": k, "epochs": 0}
        extra["dataset_seed"] = self.spec.dataset.get("seed", 0)
        return Outcome(metrics=metrics, params=0, extra=extra)

    def run_training(self, dataset: Any) -> Generator[None, None, Outcome]:
        from engine import models
        from engine.alignment.training import (
            FEATURES,
            NonFiniteLoss,
            TrainState,
            compile_model,
            evaluate,
            make_optimiser,
            metrics_of,
            resolve_device,
            seed_everything,
            train_epoch,
            wants_compile,
        )
        from engine.evaluation import LapEvaluator
        from engine.worker import CHECKPOINT_FORMAT, Checkpoints

        spec, ctx = self.spec, self.ctx
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
        train = self.pairs(dataset, "train", device)
        val = self.pairs(dataset, "val", device)
        steps_per_epoch = -(-len(train) // spec.batch_size)
        opt, sched = make_optimiser(model, spec.lr, spec.weight_decay, spec.epochs * steps_per_epoch, spec.warmup_steps)
        state = TrainState()
        metrics: dict[str, float] = {}
        resumed_from = None
        checkpoints = Checkpoints(ctx.run_dir, ctx.log)
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
            ctx.log(f"resuming from epoch {state.epoch}, batch {state.batch_in_epoch} (step {state.step})")

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

        def cancel() -> Cancelled:
            save_checkpoint()
            return Cancelled(epoch=state.epoch, step=state.step, batch=state.batch_in_epoch)

        width = int(getattr(model, "width", 0) or 0)
        ctx.emit(
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
        ctx.log(f"model {spec.model}: {params} parameters, width {width}, device {device}")
        compiled = wants_compile(spec.compile, device, spec.epochs * steps_per_epoch, spec.model)
        trained = compile_model(model, spec.features, ctx.log) if compiled else model
        train_loss = float("nan")
        with LapEvaluator(ks=spec.topk) as evaluator:
            while state.epoch < spec.epochs:
                t0 = time.perf_counter()
                try:
                    finished = train_epoch(
                        trained,
                        train,
                        opt,
                        sched,
                        state,
                        batch_size=spec.batch_size,
                        seed=spec.seed,
                        clip=spec.clip,
                        clip_mode=spec.clip_mode,
                        features=spec.features,
                        should_stop=ctx.should_stop,
                    )
                except NonFiniteLoss as exc:
                    raise RunFailed(
                        str(exc),
                        "nan",
                        event={"epoch": exc.epoch, "step": exc.step},
                        dataset=dataset.id,
                        model=spec.model,
                        params=params,
                        **device_fields(spec),
                    ) from None
                if not finished:
                    raise cancel()
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
                    ctx.emit("eval", epoch=epoch, seconds=round(time.perf_counter() - t1, 4), **metrics)
                state.epoch, state.batch_in_epoch, state.loss_sum, state.loss_nodes = epoch, 0, 0.0, 0
                save_checkpoint()
                lr = opt.param_groups[0]["lr"]
                ctx.emit(
                    "epoch",
                    epoch=epoch,
                    step=state.step,
                    train_loss=train_loss,
                    lr=lr,
                    seconds=round(seconds, 4),
                    val_acc=val_acc,
                )
                acc = f" val LAP acc {val_acc:.4f}" if val_acc is not None else ""
                ctx.log(f"epoch {epoch}/{spec.epochs} loss {train_loss:.4f}{acc} lr {lr:.2e} {seconds:.2f}s")
                if ctx.should_stop():
                    raise cancel()
                yield
        metrics.setdefault("train_loss", train_loss)
        ctx.log(f"done: val LAP accuracy {metrics.get('val_lap_acc', float('nan')):.4f}")
        extra = {**device_fields(spec), "dataset": dataset.id, "model": spec.model, "width": width}
        extra["compiled"] = trained is not model
        extra["dataset_seed"] = spec.dataset.get("seed", 0)
        return Outcome(metrics=metrics, params=params, extra={**extra, "epochs": spec.epochs})
