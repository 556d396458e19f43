"""The downstream loop of GAPE: a molecule transformer regressing a target with a positional encoding.

:func:`gape_steps` builds (or finds) the molecule dataset and its encoding and trains :class:`GapeTraining` in the
shared epoch loop (:mod:`engine.loop`: checkpoints, resume at the exact batch, stop, non-finite loss, events,
packed seeds) with the L1 loss, AdamW and a one-cycle schedule, evaluating the MAE on the validation (and test)
split. The target is standardised with the training split's mean and standard deviation (the L1 loss on that scale
is the MAE divided by the std); metrics are in the target's units. :func:`run_gape` runs one outside a worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.utils import to_dense_batch

from engine.errors import GaptuiError
from engine.gape.data import MoleculeData, build_molecules
from engine.gape.pe import Encoding, EncodingOptions, encoding
from engine.gape.spec import GapeSpec
from engine.gape.transformer import MoleculeTransformer, build_transformer
from engine.hardware import resolve_device
from engine.loop import (
    EpochTask,
    TrainState,
    epoch_order,
    epoch_steps,
    make_optimiser,
    seed_everything,
)
from engine.placement import datasets_folder
from engine.tasks.run import Cancelled, Outcome, RunContext, run_steps

Emit = Callable[..., Any]


@dataclass
class MoleculeBatch:
    """``B`` molecules padded to the largest: ``atoms [B, L]``, ``pe [B, L, p]``, ``mask [B, L]`` (True: real atom),
    ``target [B]`` (standardised)."""

    atoms: torch.Tensor
    pe: torch.Tensor
    mask: torch.Tensor
    target: torch.Tensor


class MoleculeTensors:
    """A molecule dataset and its encoding moved to a device once; batches are gathered from flat tensors."""

    def __init__(self, data: MoleculeData, enc: Encoding, device: torch.device, mean: float, std: float) -> None:
        self.device = device
        self.num_nodes = torch.as_tensor(data.num_nodes, device=device)
        self.node_ptr = torch.as_tensor(data.node_ptr, device=device)
        self.atoms = torch.as_tensor(data.arrays["atom_types"], device=device)
        self.pe = torch.as_tensor(enc.values, device=device)
        self.target = torch.as_tensor((data.arrays["target"] - mean) / std, dtype=torch.float32, device=device)
        self.flip = enc.flip

    def gather(self, ids: torch.Tensor, flip: torch.Generator | None = None) -> MoleculeBatch:
        """Batch of molecules ``ids``; with ``flip``, each molecule's first :attr:`flip` PE columns get random signs."""
        ids = ids.to(self.device)
        n = self.num_nodes[ids]
        graph = torch.repeat_interleave(torch.arange(ids.numel(), device=self.device), n)
        offsets = torch.cumsum(n, 0) - n
        nodes = self.node_ptr[ids][graph] + torch.arange(int(n.sum()), device=self.device) - offsets[graph]
        atoms, mask = to_dense_batch(self.atoms[nodes], graph, batch_size=ids.numel())
        pe, _ = to_dense_batch(self.pe[nodes], graph, batch_size=ids.numel())
        if flip is not None and self.flip:
            signs = torch.randint(0, 2, (ids.numel(), 1, self.flip), generator=flip).to(self.device) * 2 - 1
            pe = torch.cat([pe[..., : self.flip] * signs, pe[..., self.flip :]], dim=-1)
        return MoleculeBatch(atoms, pe, mask, self.target[ids])


@torch.no_grad()
def predict(model: MoleculeTransformer, data: MoleculeTensors, ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Standardised predictions for molecules ``ids``, ``[len(ids)]``, in eval mode."""
    was_training = model.training
    model.eval()
    out = [
        model(b.atoms, b.pe, b.mask)
        for b in (data.gather(ids[i : i + batch_size]) for i in range(0, len(ids), batch_size))
    ]
    model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0)


def mae(model: MoleculeTransformer, data: MoleculeTensors, ids: torch.Tensor, batch_size: int, std: float) -> float:
    """Mean absolute error in the target's units over molecules ``ids``."""
    pred = predict(model, data, ids, batch_size)
    return float((pred - data.target[ids.to(data.device)]).abs().mean()) * std


def prepare(spec: GapeSpec) -> tuple[MoleculeData, Encoding]:
    """The molecule dataset and encoding of ``spec``, built or read from the cache."""
    datasets_dir = datasets_folder(spec.datasets_dir)
    data, _ = build_molecules(spec.molecule_spec(), datasets_dir, Path(spec.data_root) if spec.data_root else None)
    runs_dir = Path(spec.runs_dir) if spec.runs_dir else datasets_dir.parent / "runs"
    options = EncodingOptions(spec.lap_k, spec.rwpe_steps, runs_dir)
    return data, encoding(data, spec.pe_spec(), datasets_dir, options)


class GapeTraining(EpochTask):
    """GAPE's step and evaluation for the shared loop (:mod:`engine.loop`): L1 epochs on the standardised target
    (AdamW, one-cycle), the MAE on the validation (and test) split every ``eval_every`` epochs and at the last,
    the best validation MAE and its epoch kept in the checkpoint."""

    def __init__(self, spec: GapeSpec, data: MoleculeData, enc: Encoding, device: torch.device) -> None:
        self.spec, self.data, self.enc, self.device = spec, data, enc, device
        splits = {name: torch.as_tensor(data.split(name)) for name in ("train", "val", "test") if data.has_split(name)}
        if "train" not in splits or "val" not in splits:
            raise GaptuiError(f"dataset {data.id} needs molecules in its train and val splits")
        target = data.arrays["target"]
        if np.isnan(target[splits["train"].numpy()]).any() or np.isnan(target[splits["val"].numpy()]).any():
            raise GaptuiError(
                f"dataset {data.id} has no regression target; name one (molecules: --param target=COLUMN)"
            )
        self.splits = splits
        mean = float(target[splits["train"].numpy()].mean())
        self.std = float(target[splits["train"].numpy()].std()) or 1.0
        self.model = build_transformer(
            budget=spec.budget,
            num_atom_types=data.num_atom_types,
            pe_dim=enc.dim,
            layers=spec.layers,
            heads=spec.heads,
            dropout=spec.dropout,
        ).to(device)
        self.tensors = MoleculeTensors(data, enc, device, mean, self.std)
        self.n_train = len(splits["train"])
        self.steps_per_epoch = -(-self.n_train // spec.batch_size)
        self.epochs = spec.epochs_for(self.n_train)
        total = self.epochs * self.steps_per_epoch
        self.opt, self.sched = make_optimiser(self.model, spec.lr, spec.weight_decay, total, spec.warmup_steps)
        self.best: dict[str, float] = {"best_val_mae": math.inf, "best_epoch": 0}

    def parts(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.opt, "scheduler": self.sched}

    def batches(self, state: TrainState) -> Iterator[MoleculeBatch]:
        spec, epoch = self.spec, state.epoch + 1
        order = self.splits["train"][epoch_order(spec.seed, epoch, self.n_train)]
        flips = torch.Generator().manual_seed(spec.seed * 1_000_003 + epoch) if self.enc.flip else None
        starts = range(0, self.n_train, spec.batch_size)
        if flips is not None:  # a resumed epoch replays the sign flips of the batches already trained
            for lo in starts[: state.batch_in_epoch]:
                size = min(spec.batch_size, self.n_train - lo)
                torch.randint(0, 2, (size, 1, self.enc.flip), generator=flips)
        self.model.train()
        for lo in starts[state.batch_in_epoch :]:
            yield self.tensors.gather(order[lo : lo + spec.batch_size], flips)

    def forward(self, batch: MoleculeBatch, state: TrainState) -> torch.Tensor:
        return self.model(batch.atoms, batch.pe, batch.mask)

    def update(self, batch: MoleculeBatch, out: torch.Tensor, state: TrainState) -> tuple[torch.Tensor, int]:
        loss = F.l1_loss(out.float(), batch.target)  # the loss in fp32 whatever the forward's precision
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        if state.step < self.sched.total_steps:
            self.sched.step()
        return loss.detach(), batch.target.numel()

    def summary(self, state: TrainState) -> dict[str, float]:
        return {"train_loss": state.mean_loss * self.std}  # the training MAE, in the target's units

    def evaluate(self, epoch: int, summary: dict[str, float]) -> dict[str, float] | None:
        spec, splits = self.spec, self.splits
        if epoch % spec.eval_every and epoch != self.epochs:
            return None
        val_mae = mae(self.model, self.tensors, splits["val"], spec.batch_size, self.std)
        metrics = {"val_mae": val_mae, "train_loss": summary["train_loss"]}
        if "test" in splits:
            metrics["test_mae"] = mae(self.model, self.tensors, splits["test"], spec.batch_size, self.std)
        if val_mae < self.best["best_val_mae"]:
            self.best = {"best_val_mae": val_mae, "best_epoch": epoch}
            if "test" in splits:
                self.best["test_mae_at_best"] = metrics["test_mae"]
        return metrics

    def epoch_fields(self, evaluated: dict[str, float] | None) -> dict[str, Any]:
        return {"val_mae": None if evaluated is None else evaluated["val_mae"]}

    def fields(self) -> dict[str, Any]:
        """The run's description (``start`` event, ``result.json``)."""
        spec, model = self.spec, self.model
        return {"dataset": self.data.id, "model": "transformer", "params": model.num_parameters, "width": model.width,
                "pe": spec.pe}  # fmt: skip

    def start_fields(self) -> dict[str, Any]:
        return {"device": str(self.device), "n_train": self.n_train, "n_val": len(self.splits["val"]), **self.fields()}

    def checkpoint_fields(self) -> dict[str, Any]:
        return {"best": self.best}

    def load_checkpoint(self, ckpt: dict[str, Any]) -> None:
        self.best = dict(ckpt.get("best", self.best))

    def failure_fields(self) -> dict[str, Any]:
        return self.fields()


def gape_steps(spec: GapeSpec, ctx: RunContext) -> Generator[None, None, Outcome]:
    """The downstream run ``spec`` in ``ctx.run_dir`` through the shared loop, yielding after each epoch.

    The molecules and their encoding are read once per worker process (the seeds of a pack share them).
    """
    key = "gape-data:" + spec.replace(seed=0).run_id()
    if key not in ctx.shared:
        ctx.emit("progress", phase="preparing", what=f"reading the molecules and their PE {spec.pe}")
        ctx.shared[key] = prepare(spec)
    data, enc = ctx.shared[key]
    device = resolve_device(spec.device)
    seed_everything(spec.seed)
    task = GapeTraining(spec, data, enc, device)
    model = task.model
    ctx.log(f"transformer: {model.num_parameters} parameters, width {model.width}, ff {model.ff}; "
            f"PE {spec.pe} ({enc.dim} dims)")  # fmt: skip
    result = yield from epoch_steps(task, ctx, spec.run_id(), spec.run_options())
    metrics = {**result.metrics, **task.best}
    ctx.log(f"done: val MAE {metrics['val_mae']:.4f}")
    fields = task.fields()
    params = fields.pop("params")
    extra = {**fields, "epochs": task.epochs, "precision": result.precision}
    return Outcome(metrics=metrics, params=params, extra=extra)


def run_gape(
    spec: GapeSpec,
    run_dir: Path,
    emit: Emit,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    log: Callable[[str], None] = lambda _text: None,
) -> dict[str, Any]:
    """:func:`gape_steps` alone, outside a worker: train and evaluate ``spec`` in ``run_dir``; the result fields.

    ``result["status"]`` is ``done`` (with ``metrics``, ``params``...) or ``cancelled`` (``should_stop`` answered
    True; the checkpoint is saved and the run resumes from it, ``epoch``, ``step`` and ``batch`` say where).
    Raises :class:`GaptuiError` for bad input and :class:`~engine.tasks.RunFailed` when the loss diverges.
    """
    ctx = RunContext(Path(run_dir), emit, log, should_stop)
    try:
        outcome = run_steps(gape_steps(spec, ctx))
    except Cancelled as stop:
        return {"status": "cancelled", **stop.where}
    return {"status": "done", "metrics": outcome.metrics, "params": outcome.params, **outcome.extra}
