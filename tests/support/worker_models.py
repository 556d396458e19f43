"""User-style models that misbehave on purpose, to test how workers and the manager handle failures."""

from __future__ import annotations

import os
import signal
import time

import torch
from torch import Tensor, nn


class _Base(nn.Module):
    def __init__(self, *, out_dim: int, budget: int, in_dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        deg = torch.zeros(x.shape[0], 1, device=x.device).index_add_(
            0, edge_index[0], torch.ones(edge_index.shape[1], 1, device=x.device)
        )
        return self.lin(x) * (1 + deg)


class NaNModel(_Base):
    """Finite outputs until it is trained: the first training forward pass returns NaN."""

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        out = super().forward(x, edge_index, batch)
        return out * float("nan") if self.training and torch.is_grad_enabled() else out


class CrashModel(_Base):
    """Raises in the first training forward pass, like a bug in a user's architecture."""

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        if self.training and torch.is_grad_enabled():
            raise RuntimeError("injected crash in CrashModel.forward")
        return super().forward(x, edge_index, batch)


class SleepyModel(_Base):
    """Sleeps 0.25 s per training batch: a run of predictable wall time for time-limit and cancel tests."""

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        if self.training and torch.is_grad_enabled():
            time.sleep(0.25)
        return super().forward(x, edge_index, batch)


class HardExitModel(_Base):
    """The worker process ends at once (``os._exit``) in its first training batch: no error event, no result."""

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        if self.training and torch.is_grad_enabled():
            os._exit(7)
        return super().forward(x, edge_index, batch)


class KillParentModel(_Base):
    """Kills the process that started the worker (a Slurm task), then exits: the task reports nothing."""

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        if self.training and torch.is_grad_enabled():
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(9)
        return super().forward(x, edge_index, batch)
