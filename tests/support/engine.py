"""Engine-side builders: a small alignment spec file, a run's result, random graphs and batches, and stand-ins of
the epoch loop's collaborators (a stopper, an event recorder, a task of a few lines)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from engine.loop import EpochTask, TrainState, epoch_order

#: A tiny alignment run (ER, 16 nodes): seconds of training on one thread.
TINY_SPEC = {
    "dataset": {"base": "er", "noise": 0.05, "n_train": 20, "n_val": 6, "params": {"n": 16, "degree": 4}},
    "model": "gcn",
    "epochs": 2,
    "batch_size": 10,
    "budget": 3000,
    "out_dim": 8,
}
#: The dataset of ``spec_file``: ER graphs of 20 nodes, 30 training pairs.
PACK_DATASET = {"base": "er", "noise": 0.12, "n_train": 30, "n_val": 10, "params": {"n": 20, "degree": 5}}


def spec_file(tmp_path: Path, name: str, **overrides) -> Path:
    """Write ``tmp_path/NAME.json``: a two-epoch alignment spec with dropout (``overrides`` set any key)."""
    spec = {
        "dataset": PACK_DATASET,
        "model": "gcn",
        # Dropout draws from the global torch generator: equal results need each run's random state kept apart.
        "model_kwargs": {"dropout": 0.1},
        "epochs": 2,
        "batch_size": 10,
        "budget": 5000,
        "out_dim": 16,
        "datasets_dir": str(tmp_path / "datasets"),
        **overrides,
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(spec))
    return path


def result_of(out: Path) -> dict:
    """The ``result.json`` a worker wrote into ``out``."""
    return json.loads((out / "result.json").read_text())


def random_graph(num_nodes: int, p: float, seed: int) -> Tensor:
    """Erdos-Renyi ``edge_index`` ``[2, 2m]`` with both directions, from a private generator."""
    gen = torch.Generator().manual_seed(seed)
    upper = torch.triu(torch.rand(num_nodes, num_nodes, generator=gen) < p, diagonal=1)
    u, v = upper.nonzero(as_tuple=True)
    return torch.stack([torch.cat([u, v]), torch.cat([v, u])])


def equal_size_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three graphs of 8 nodes in order: the dense per-graph norm applies."""
    edges = [random_graph(8, 0.4, seed) + 8 * i for i, seed in enumerate((1, 2, 3))]
    return torch.cat(edges, dim=1), torch.arange(3).repeat_interleave(8)


def ragged_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Graphs of 9 and 7 nodes, a self-loop and one edge in a single direction: PyG's norm, general matrices."""
    first, second = random_graph(9, 0.4, 4), random_graph(7, 0.5, 5) + 9
    extra = torch.tensor([[3, 10], [3, 12]])  # self-loop on 3, directed edge 10 -> 12
    return torch.cat([first, second, extra], dim=1), torch.cat([torch.zeros(9), torch.ones(7)]).long()


class Stopper:
    """``should_stop`` that answers True from its ``after + 1``-th call on."""

    def __init__(self, after: int) -> None:
        self.after, self.calls = after, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls > self.after


class Events(list):
    """A run's events as a worker would write them, but for ``progress`` (where it is, said now and then)."""

    def __call__(self, name: str, **fields: Any) -> None:
        if name != "progress":
            self.append((name, fields))


class Line(EpochTask):
    """A linear fit with noisy inputs (the noise draws from the global generator, like dropout); ``nan_at``: the
    optimiser step whose loss is NaN."""

    def __init__(self, nan_at: int | None = None) -> None:
        torch.manual_seed(0)
        self.model = nn.Linear(2, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.x = torch.randn(16, 2)
        self.y = self.x @ torch.tensor([[1.0], [-2.0]])
        self.epochs, self.steps_per_epoch, self.nan_at = 3, 4, nan_at

    def parts(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.opt}

    def batches(self, state: TrainState) -> Iterator[torch.Tensor]:
        order = epoch_order(0, state.epoch + 1, 16)
        return (order[lo : lo + 4] for lo in range(0, 16, 4)[state.batch_in_epoch :])

    def forward(self, ids: torch.Tensor, state: TrainState) -> torch.Tensor:
        return self.model(self.x[ids] + 0.01 * torch.randn(len(ids), 2))

    def update(self, ids: torch.Tensor, out: torch.Tensor, state: TrainState) -> tuple[torch.Tensor, int]:
        loss = ((out.float() - self.y[ids]) ** 2).mean()
        if state.step + 1 == self.nan_at:
            loss = loss * float("nan")
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.detach(), len(ids)

    def evaluate(self, epoch: int, summary: dict[str, float]) -> dict[str, float] | None:
        with torch.no_grad():
            return {"val_loss": float(((self.model(self.x) - self.y) ** 2).mean()), **summary}
