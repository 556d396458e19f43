"""SoPool-Attentional: attentional second-order pooling (Wang & Ji, "Second-Order Pooling for GNNs")."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter


class SoPoolAttentional(nn.Module):
    r"""Second-order pooling reduced by a learned vector, i.e. a sum weighted by unnormalised attention.

    For a graph with node features :math:`H \in \mathbb{R}^{n \times d}` and a learned :math:`\mu \in
    \mathbb{R}^{d}`:

    .. math::
        \mathrm{SoPool}_{\mathrm{attn}}(H) = H^\top H \mu = \sum_i (h_i^\top \mu)\, h_i \in \mathbb{R}^{d}

    :math:`H \mu` scores each node and the output sums the nodes weighted by their scores (no softmax, so the
    graph size is kept, as with a sum). Invariant to the node order.

    Shapes: ``x`` ``[N, d]``, ``index`` ``[N]``, output ``[dim_size, d]``.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels
        self.mu = nn.Parameter(torch.empty(channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = self.channels**-0.5
        nn.init.uniform_(self.mu, -bound, bound)

    def forward(self, x: Tensor, index: Tensor, dim_size: int | None = None) -> Tensor:
        scores = x @ self.mu  # [N]
        return scatter(scores[:, None] * x, index, dim=0, dim_size=dim_size, reduce="sum")
