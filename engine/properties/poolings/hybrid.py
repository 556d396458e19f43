"""Hybrid pooling: a weighted sum of soft attention and SoPool-Attentional (the property benchmark, section 4.3)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class HybridPooling(nn.Module):
    r"""``a * soft_attention(H) + (1 - a) * sopool_attentional(H)``, both of width ``d``.

    The seed's sketch fixes ``a = 0.6``. With ``learn`` the weight is ``a = sigmoid(w)`` for a learned scalar ``w``
    that starts at ``logit(weight)``, so ``a`` stays in ``(0, 1)`` and starts at the seed's value. The two parts are
    any poolings called as ``pool(x, index, dim_size=B)`` that return ``[B, d]`` (here the registry's
    ``attention`` and ``sopool_attentional``, so ``hybrid`` is those two modules, not a re-implementation).

    Shapes: ``x`` ``[N, d]``, ``index`` ``[N]``, output ``[dim_size, d]``.
    """

    def __init__(self, attention: nn.Module, sopool: nn.Module, weight: float = 0.6, learn: bool = False) -> None:
        super().__init__()
        if not 0.0 < weight < 1.0:
            raise ValueError(f"hybrid pooling weight {weight}: expected a share strictly between 0 and 1")
        self.attention, self.sopool, self.learn = attention, sopool, learn
        logit = torch.tensor(math.log(weight / (1.0 - weight)))
        if learn:
            self.logit = nn.Parameter(logit)
        else:
            self.register_buffer("logit", logit)

    @property
    def weight(self) -> Tensor:
        """The share ``a`` of soft attention (a 0-d tensor)."""
        return torch.sigmoid(self.logit)

    def forward(self, x: Tensor, index: Tensor, dim_size: int | None = None) -> Tensor:
        a = self.weight
        return a * self.attention(x, index, dim_size=dim_size) + (1 - a) * self.sopool(x, index, dim_size=dim_size)
