"""User-style models for tests of ``build("tests.helpers_models:...")``: good ones and contract breakers."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import GraphConv


class TinyGNN(nn.Module):
    """A minimal model honouring the contract: one GraphConv, ``[N, in_dim] -> [N, out_dim]``."""

    def __init__(self, *, out_dim: int, budget: int, in_dim: int, hidden: int = 8) -> None:
        super().__init__()
        self.budget = budget  # kept so tests can see what build passed
        self.conv = GraphConv(in_dim, hidden)
        self.out = nn.Linear(hidden, out_dim)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        return self.out(torch.relu(self.conv(x, edge_index)))


def make_tiny(*, out_dim: int, budget: int, in_dim: int, **kwargs: Any) -> nn.Module:
    """A factory function rather than a class."""
    return TinyGNN(out_dim=out_dim, budget=budget, in_dim=in_dim, **kwargs)


def not_a_module(*, out_dim: int, budget: int, in_dim: int) -> dict[str, int]:
    """Breaks the contract: returns something that is not an nn.Module."""
    return {"out_dim": out_dim}


class WrongShape(TinyGNN):
    """Breaks the contract: one output column too many."""

    def __init__(self, *, out_dim: int, budget: int, in_dim: int) -> None:
        super().__init__(out_dim=out_dim + 1, budget=budget, in_dim=in_dim)


NOT_CALLABLE = 42
