"""SoPool-BiMap: second-order pooling with a bilinear map (Wang & Ji, "Second-Order Pooling for GNNs")."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter


class SoPoolBiMap(nn.Module):
    r"""Second-order pooling, reduced by a learned bilinear map.

    For a graph with node features :math:`H \in \mathbb{R}^{n \times d}` and a learned
    :math:`W \in \mathbb{R}^{d \times d'}`:

    .. math::
        \mathrm{SoPool}_{\mathrm{bimap}}(H) = \mathrm{flatten}\left(H^\top H W\right) \in \mathbb{R}^{d d'}

    :math:`H^\top H = \sum_i h_i h_i^\top` is the sum of the nodes' outer products, so the result is invariant to
    the node order; the map :math:`W` keeps the output at :math:`d d'` instead of :math:`d^2`. It is computed
    per node as :math:`\sum_i h_i \otimes (W^\top h_i)`, never forming :math:`H^\top H`.

    Shapes: ``x`` ``[N, d]`` (nodes of all graphs), ``index`` ``[N]`` (graph of each node), output
    ``[dim_size, d * d']``.
    """

    def __init__(self, channels: int, reduced: int = 16) -> None:
        super().__init__()
        self.channels = channels
        self.reduced = reduced
        self.weight = nn.Parameter(torch.empty(channels, reduced))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x: Tensor, index: Tensor, dim_size: int | None = None) -> Tensor:
        outer = x[:, :, None] * (x @ self.weight)[:, None, :]  # [N, d, d']: h_i (W^T h_i)^T
        pooled = scatter(outer.flatten(1), index, dim=0, dim_size=dim_size, reduce="sum")
        return pooled
