"""The alignment worker loop: the training loop of one run, or a run that trains nothing
(:mod:`engine.alignment.search`)."""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.alignment.spec import RunSpec
from engine.loop import EpochTask, TrainState
from engine.placement import datasets_folder
from engine.tasks.run import Outcome, RunContext

if TYPE_CHECKING:
    from engine.alignment.training import SiameseStep

# ------------------------------------------------------------------------------------------------ worker loop


def dataset_dirs(spec: RunSpec) -> tuple[Path, Path | None]:

    datasets_dir = datasets_folder(spec.datasets_dir)
    return datasets_dir, Path(spec.data_root) if spec.data_root else None


def device_fields(spec: RunSpec) -> dict[str, Any]:
    from engine.hardware import device_fields, resolve_device

    return device_fields(resolve_device(spec.device))


class AlignmentRun:
    """One alignment worker execution: the training loop, or a run that trains nothing (the Laplacian baseline, a
    solver, search on top of a trained model)."""

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
        self.ctx.emit("progress", phase="preparing", what="reading its dataset")
        dataset, built = build_dataset(self.spec.dataset_spec(), *dataset_dirs(self.spec))
        self.ctx.log(f"dataset {dataset.id} ({'built' if built else 'cached'}) at {dataset.path}")
        self.ctx.shared[key] = dataset
        return dataset

    def pairs(self, dataset: Any, split: str, device: Any) -> Any:
        """The split's tensors on ``device`` with the positional inputs of the run's ``features`` (read from the
        dataset's cache or computed and cached there), built once per worker process (read-only during training)."""
        from engine.alignment.features import dataset_positional, parse_features
        from engine.alignment.training import PairTensors

        features = parse_features(self.spec.features)
        positional = "+".join(p.text for p in features.positional)
        key = f"alignment-pairs:{dataset.id}:{split}:{device}:{positional}"
        if key not in self.ctx.shared:
            pairs = dataset.split(split)
            if positional:
                self.ctx.emit("progress", phase="preparing", what=f"positional inputs {positional} ({split})")
            arrays = dataset_positional(dataset, split, pairs, features, self.ctx.log)
            self.ctx.shared[key] = PairTensors(pairs, device, positional=arrays)
        return self.ctx.shared[key]

    def out_dim(self, dataset: Any) -> int:
        from engine.sources import SOURCES

        return self.spec.out_dim or SOURCES.get(dataset.spec["base"]).embedding_dim

    def steps(self) -> Generator[None, None, Outcome]:
        """The run, yielding after each epoch (the turn of the next run of a pack)."""
        self.spec.check_memory()
        dataset = self.dataset()
        if self.spec.decoder:
            from engine.alignment.search import decoder_run

            return decoder_run(self, dataset)
        if not self.spec.trained:
            from engine.alignment.search import reference_run

            return reference_run(self, dataset)
        return (yield from self.run_training(dataset))

    def run_training(self, dataset: Any) -> Generator[None, None, Outcome]:
        from engine.evaluation import LapEvaluator
        from engine.hardware import resolve_device
        from engine.loop import epoch_steps, seed_everything

        spec, ctx = self.spec, self.ctx
        device = resolve_device(spec.device)
        seed_everything(spec.seed)
        with LapEvaluator(ks=spec.topk) as evaluator:
            task = AlignmentTraining(self, dataset, device, evaluator)
            ctx.log(f"model {spec.model}: {task.params} parameters, width {task.width}, device {device}")
            result = yield from epoch_steps(task, ctx, spec.run_id(), spec.run_options())
        metrics = result.metrics
        if task.last_pairs is not None:
            from engine.alignment.search import ceiling_metrics, symmetry_of, write_pairs

            write_pairs(self, task.last_pairs)
            metrics = {**metrics, **ceiling_metrics(symmetry_of(self, dataset))}
        ctx.log(f"done: val LAP accuracy {metrics.get('val_lap_acc', float('nan')):.4f}")
        extra = {**device_fields(spec), "dataset": dataset.id, "model": spec.model, "width": task.width}
        extra["compiled"] = task.trained is not task.model
        extra["precision"] = result.precision
        extra["dataset_seed"] = spec.dataset.get("seed", 0)
        return Outcome(metrics=metrics, params=task.params, extra={**extra, "epochs": spec.epochs})


class AlignmentTraining(EpochTask):
    """Alignment's step and evaluation for the shared loop: siamese epochs over the training pairs, the LAP
    accuracy on the validation pairs every ``eval_every`` epochs and at the last."""

    def __init__(self, run: AlignmentRun, dataset: Any, device: Any, evaluator: Any) -> None:
        from engine import models
        from engine.alignment.features import feature_dim
        from engine.loop import make_optimiser

        spec = self.spec = run.spec
        self.dataset, self.device, self.evaluator = dataset, device, evaluator
        self.out_dim = run.out_dim(dataset)
        self.model = models.build(
            spec.model,
            out_dim=self.out_dim,
            budget=spec.budget,
            in_dim=feature_dim(spec.features),
            **spec.model_options(),
        ).to(device)
        self.trained = self.model
        self.params = models.count_parameters(self.model)
        self.width = int(getattr(self.model, "width", 0) or 0)
        self.train = run.pairs(dataset, "train", device)
        self.val = run.pairs(dataset, "val", device)
        self.val_split = dataset.split("val")
        self.epochs = spec.epochs
        self.steps_per_epoch = -(-len(self.train) // spec.batch_size)
        total = spec.epochs * self.steps_per_epoch
        self.opt, self.sched = make_optimiser(
            self.model, spec.lr, spec.weight_decay, total, spec.warmup_steps, spec.schedule
        )
        self.log = run.ctx.log
        self.run = run
        #: The per-pair metrics of the latest evaluation (``val_pairs.csv`` of the finished run).
        self.last_pairs: Any = None
        self.siamese = self.siamese_step()

    def siamese_step(self) -> SiameseStep:
        """The training step of :attr:`trained` (the model, or its compiled form) on the training pairs."""
        from engine.alignment.training import SiameseStep

        spec = self.spec
        return SiameseStep(
            self.trained,
            self.train,
            self.opt,
            self.sched,
            batch_size=spec.batch_size,
            seed=spec.seed,
            clip=spec.clip,
            clip_mode=spec.clip_mode,
            features=spec.features,
        )

    def compile_pays(self, device: Any) -> bool:
        from engine.alignment.training import wants_compile

        return wants_compile("auto", device, self.spec.epochs * self.steps_per_epoch, self.spec.model)

    def compile(self) -> None:
        from engine.alignment.training import compile_model

        self.trained = compile_model(self.model, self.spec.features, self.log)
        self.siamese = self.siamese_step()

    def parts(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.opt, "scheduler": self.sched}

    def batches(self, state: TrainState) -> Iterable[Any]:
        return self.siamese.batches(state)

    def forward(self, batch: Any, state: TrainState) -> Any:
        return self.siamese.forward(batch, state)

    def update(self, batch: Any, out: Any, state: TrainState) -> tuple[Any, Any]:
        return self.siamese.update(batch, out, state)

    def evaluate(self, epoch: int, summary: dict[str, float]) -> dict[str, float] | None:
        from engine.alignment.training import evaluate, metrics_of

        spec = self.spec
        # Without validation pairs there is no metric: it stays missing (never a 0 % that could rank).
        if not len(self.val) or (epoch % spec.eval_every and epoch != spec.epochs):
            return None
        from engine.alignment.search import structure, symmetry_of

        scores, val_loss = evaluate(self.model, self.val, spec.batch_size, self.evaluator, spec.features)
        self.last_pairs = structure(self.val_split, scores, symmetry_of(self.run, self.dataset))
        return {**metrics_of(scores, val_loss), **self.last_pairs.summary(), "train_loss": summary["train_loss"]}

    def epoch_fields(self, evaluated: dict[str, float] | None) -> dict[str, Any]:
        return {"val_acc": None if evaluated is None else evaluated["val_lap_acc"]}

    def start_fields(self) -> dict[str, Any]:
        return {
            "model": self.spec.model,
            "params": self.params,
            "width": self.width,
            "device": str(self.device),
            "dataset": self.dataset.id,
            "n_train": len(self.train),
            "n_val": len(self.val),
        }

    def checkpoint_fields(self) -> dict[str, Any]:
        # What a GAPE run reads to rebuild the trained model (engine.gape.embed).
        from engine.alignment.features import feature_dim

        return {
            "model_name": self.spec.model,
            "width": self.width,
            "params": self.params,
            "in_dim": feature_dim(self.spec.features),
            "out_dim": self.out_dim,
            "features": self.spec.features,
        }

    def failure_fields(self) -> dict[str, Any]:
        fields = {"dataset": self.dataset.id, "model": self.spec.model, "params": self.params}
        return {**fields, **device_fields(self.spec)}
