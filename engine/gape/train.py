"""The downstream loop of GAPE: a molecule transformer regressing a target with a positional encoding.

``run_gape(spec, run_dir, emit)`` builds (or finds) the molecule dataset and its encoding, trains with the L1
loss, AdamW and a one-cycle schedule, evaluates the MAE on the validation (and test) split, and streams the
events of :mod:`engine.events` through ``emit``. The target is standardised with the training split's mean and
standard deviation (the L1 loss on that scale is the MAE divided by the std); metrics are in the target's units.
A checkpoint is written after every epoch; stopped runs resume from the last completed epoch.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.utils import to_dense_batch

from engine.alignment.training import NonFiniteLoss, epoch_order, make_optimiser, resolve_device, seed_everything
from engine.errors import GaptuiError
from engine.gape.data import MoleculeData, build_molecules
from engine.gape.pe import Encoding, EncodingOptions, encoding
from engine.gape.spec import GapeSpec
from engine.gape.transformer import MoleculeTransformer, build_transformer

CHECKPOINT_FORMAT = 1
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
    from engine.worker import default_datasets_dir

    datasets_dir = Path(spec.datasets_dir) if spec.datasets_dir else default_datasets_dir()
    data, _ = build_molecules(spec.molecule_spec(), datasets_dir, Path(spec.data_root) if spec.data_root else None)
    runs_dir = Path(spec.runs_dir) if spec.runs_dir else datasets_dir.parent / "runs"
    options = EncodingOptions(spec.lap_k, spec.rwpe_steps, runs_dir)
    return data, encoding(data, spec.pe_spec(), datasets_dir, options)


def run_gape(
    spec: GapeSpec,
    run_dir: Path,
    emit: Emit,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    log: Callable[[str], None] = lambda _text: None,
) -> dict[str, Any]:
    """Train and evaluate the downstream run ``spec`` in ``run_dir``; returns the result fields.

    ``result["status"]`` is ``done`` or ``cancelled`` (``should_stop`` answered True; the checkpoint of the last
    completed epoch is kept and the run resumes from it). Raises :class:`GaptuiError` for bad input and
    :class:`engine.alignment.training.NonFiniteLoss` when the loss diverges.
    """
    started = time.perf_counter()
    run_dir = Path(run_dir)
    data, enc = prepare(spec)
    splits = {name: torch.as_tensor(data.split(name)) for name in ("train", "val", "test") if data.has_split(name)}
    if "train" not in splits or "val" not in splits:
        raise GaptuiError(f"dataset {data.id} needs molecules in its train and val splits")
    target = data.arrays["target"]
    if np.isnan(target[splits["train"].numpy()]).any() or np.isnan(target[splits["val"].numpy()]).any():
        raise GaptuiError(f"dataset {data.id} has no regression target; name one (molecules: --param target=COLUMN)")
    mean = float(target[splits["train"].numpy()].mean())
    std = float(target[splits["train"].numpy()].std()) or 1.0
    device = resolve_device(spec.device)
    seed_everything(spec.seed)
    model = build_transformer(
        budget=spec.budget,
        num_atom_types=data.num_atom_types,
        pe_dim=enc.dim,
        layers=spec.layers,
        heads=spec.heads,
        dropout=spec.dropout,
    ).to(device)
    tensors = MoleculeTensors(data, enc, device, mean, std)
    n_train = len(splits["train"])
    steps_per_epoch = -(-n_train // spec.batch_size)
    epochs = spec.epochs_for(n_train)
    opt, sched = make_optimiser(model, spec.lr, spec.weight_decay, epochs * steps_per_epoch, spec.warmup_steps)
    epoch, step = 0, 0
    metrics: dict[str, float] = {}
    best = {"best_val_mae": math.inf, "best_epoch": 0}
    ckpt_path = run_dir / "checkpoint.pt"
    resumed_from = None
    if ckpt_path.exists():
        from engine.worker import read_checkpoint

        ckpt = read_checkpoint(ckpt_path, device)
        if ckpt.get("run") != spec.hash():
            raise GaptuiError(f"{ckpt_path} belongs to another run spec; use a fresh run folder")
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        epoch, step = ckpt["state"]["epoch"], ckpt["state"]["step"]
        metrics, best = dict(ckpt["metrics"]), dict(ckpt["best"])
        resumed_from = {"epoch": epoch, "batch": 0, "step": step}
        log(f"resuming after epoch {epoch} (step {step})")

    def save() -> None:
        tmp = ckpt_path.with_name(".checkpoint.pt.tmp")
        weights = {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict()}
        torch.save(
            {
                "format": CHECKPOINT_FORMAT,
                "run": spec.hash(),
                "state": {"epoch": epoch, "step": step},
                "metrics": metrics,
                "best": best,
                **weights,
            },
            tmp,
        )
        os.replace(tmp, ckpt_path)

    params = model.num_parameters
    fields = {"dataset": data.id, "model": "transformer", "params": params, "width": model.width, "pe": spec.pe}
    emit(
        "start",
        run=spec.hash(),
        device=str(device),
        n_train=n_train,
        n_val=len(splits["val"]),
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        resumed_from=resumed_from,
        pid=os.getpid(),
        **fields,
    )
    log(f"transformer: {params} parameters, width {model.width}, ff {model.ff}; PE {spec.pe} ({enc.dim} dims)")
    model.train()
    while epoch < epochs:
        t0 = time.perf_counter()
        order = splits["train"][epoch_order(spec.seed, epoch + 1, n_train)]
        flips = torch.Generator().manual_seed(spec.seed * 1_000_003 + epoch + 1) if enc.flip else None
        loss_sum = 0.0
        for lo in range(0, n_train, spec.batch_size):
            if should_stop():
                return {"status": "cancelled", "epoch": epoch, "step": step, **fields}
            batch = tensors.gather(order[lo : lo + spec.batch_size], flips)
            loss = F.l1_loss(model(batch.atoms, batch.pe, batch.mask), batch.target)
            value = float(loss.detach())
            if not math.isfinite(value):
                raise NonFiniteLoss(epoch + 1, step + 1, value)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step < sched.total_steps:
                sched.step()
            step += 1
            loss_sum += value * batch.target.numel()
        epoch += 1
        train_loss = loss_sum / n_train * std
        seconds = time.perf_counter() - t0
        val_mae = None
        if epoch % spec.eval_every == 0 or epoch == epochs:
            t1 = time.perf_counter()
            val_mae = mae(model, tensors, splits["val"], spec.batch_size, std)
            metrics = {"val_mae": val_mae, "train_loss": train_loss}
            if "test" in splits:
                metrics["test_mae"] = mae(model, tensors, splits["test"], spec.batch_size, std)
            if val_mae < best["best_val_mae"]:
                best = {"best_val_mae": val_mae, "best_epoch": epoch}
                if "test" in splits:
                    best["test_mae_at_best"] = metrics["test_mae"]
            emit("eval", epoch=epoch, seconds=round(time.perf_counter() - t1, 4), **metrics)
        save()
        lr = opt.param_groups[0]["lr"]
        emit("epoch", epoch=epoch, step=step, train_loss=train_loss, lr=lr, seconds=round(seconds, 4), val_mae=val_mae)
        shown = f" val MAE {val_mae:.4f}" if val_mae is not None else ""
        log(f"epoch {epoch}/{epochs} train MAE {train_loss:.4f}{shown} lr {lr:.2e} {seconds:.2f}s")
        if should_stop() and epoch < epochs:
            return {"status": "cancelled", "epoch": epoch, "step": step, **fields}
    metrics = {**metrics, **best}
    emit("done", metrics=metrics, params=params, seconds=round(time.perf_counter() - started, 3))
    log(f"done: val MAE {metrics['val_mae']:.4f}")
    return {"status": "done", "metrics": metrics, "epochs": epochs, **fields}
