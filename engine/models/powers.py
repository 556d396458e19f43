"""Models whose block filters by powers of the adjacency: TAGCN, SGC and PAN.

Each is a :class:`~engine.models.base.ResidualGNN`; see there for the block scaffold. On the fast path TAGCN's and
SGC's hops are products with the shared CSR matrices of the pass (:func:`engine.models.sparse.convolve`), and
PAN's path sums are products with the dense per-graph powers of ``A`` that every layer of the pass shares.
Notation: :math:`A` the adjacency (:math:`A_{ij} = 1` for an edge :math:`j \\to i`), :math:`D` its in-degrees,
:math:`\\tilde A = D^{-1/2} A D^{-1/2}` and :math:`\\hat A = (D + I)^{-1/2} (A + I) (D + I)^{-1/2}` (GCN's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch_geometric.nn import SGConv, TAGConv

from engine.models.base import Option, ResidualGNN, positive_int, register
from engine.models.sparse import Graph, GraphLayer

#: Bytes per fp32 scalar.
_FLOAT = 4


@register("tagcn", "TAGCN (Du et al. 2017), PyG TAGConv: a learned polynomial of K hops (K = 3)")
class TAGCN(ResidualGNN):
    r"""Topology adaptive graph convolution, one :class:`~torch_geometric.nn.TAGConv` per block.

    .. math:: c = \sum_{k=0}^{K} \tilde A^k h \, W_k + b

    with one weight matrix per hop (``K`` = ``hops``, default 3) and no self-loops in :math:`\tilde A`. On the
    fast path the ``K`` hops are ``K`` sparse products and the ``K + 1`` weights one dense product.
    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    OPTIONS: ClassVar[dict[str, Option]] = {
        "hops": Option(3, positive_int, "K, the hops of TAGConv's polynomial (one weight matrix each)"),
    }

    def __init__(self, *, width: int, hops: int = 3, **common: Any) -> None:
        super().__init__(lambda w: TAGConv(w, w, K=hops), width=width, **common)
        self.hops = hops


@register("sgc", "SGC (Wu et al. 2019), PyG SGConv: K = 2 propagations then one linear map (the linear baseline)")
class SGC(ResidualGNN):
    r"""Simplifying graph convolution, one :class:`~torch_geometric.nn.SGConv` per block.

    .. math:: c = \hat A^K h \, W + b

    ``K`` = ``hops`` (default 2). Wu et al. stack no nonlinearity: one ``SGConv`` with ``layers=1`` and
    ``input_layer="linear"`` is their model up to the scaffold's norm and readout; at the default depth it is
    the scaffold's residual blocks around a linear filter, the baseline a nonlinear model has to beat at
    equal budget. Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    OPTIONS: ClassVar[dict[str, Option]] = {
        "hops": Option(2, positive_int, "K, the propagations of SGConv before its linear map"),
    }

    def __init__(self, *, width: int, hops: int = 2, **common: Any) -> None:
        super().__init__(lambda w: SGConv(w, w, K=hops), width=width, **common)
        self.hops = hops


class PANConv(GraphLayer):
    r"""Path integral based convolution (Ma et al. 2020) with PyG's ``PANConv`` formula, on dense per-graph blocks.

    With learned path weights :math:`w_0 .. w_L` (``L`` = ``filter_size``, each initialised to 0.5) and
    :math:`c_k = \prod_{i \le k} w_i`, the maximal entropy transition matrix and the output are

    .. math:: M = \sum_{k=0}^{L} c_k A^k, \qquad
        \bar M = \Delta^{-1/2} M \Delta^{-1/2}, \qquad c = \bar M h \, W + b

    where :math:`\Delta_{ii}` counts the nodes that node :math:`i` reaches by a walk of at most :math:`L` steps
    (itself included): the stored entries of PyG's sparse :math:`M`, whatever the weights. PyG's layer builds
    :math:`M` with ``torch_sparse`` (not installed with gaptui); here the powers :math:`A^k` are dense
    ``[graphs, n, n]`` blocks (graphs padded to the largest of the batch), computed once per forward pass and
    shared by every layer, so a layer costs one weighted sum of the blocks and one batched product. With the
    model's ``sparse=False`` it computes PyG's way instead, on sparse matrices of the whole batch built per layer.
    """

    def __init__(self, in_channels: int, out_channels: int, filter_size: int) -> None:
        super().__init__()
        self.in_channels, self.out_channels, self.filter_size = in_channels, out_channels, filter_size
        self.lin = nn.Linear(in_channels, out_channels)
        self.weight = nn.Parameter(torch.empty(filter_size + 1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()
        with torch.no_grad():
            self.weight.fill_(0.5)

    def forward(self, h: Tensor, graph: Graph, fast: bool = True) -> Tensor:
        if not fast:
            return self.lin(self._sparse_formula(h, graph.edge_index))
        dtype = torch.float64 if h.dtype == torch.float64 else torch.float32  # fp32 under bf16 autocast too
        key = ("pan", self.filter_size, dtype)
        powers = graph.cached(key, lambda: normalised_powers(graph, self.filter_size, dtype))
        index, slot, mask, n = graph.slots()
        if graph.graph_size is not None:  # equal graphs in order: a view, no padding
            dense = h.view(-1, graph.graph_size, h.shape[-1])
        else:
            dense = h.new_zeros(mask.shape[0], n, h.shape[-1]).index_put((index, slot), h)
        coefficients = torch.cumprod(self.weight, 0).to(powers.dtype)
        matrix = torch.einsum("k,kgij->gij", coefficients, powers)
        out = torch.bmm(matrix.to(dense.dtype), dense)
        out = out.view(-1, h.shape[-1]) if graph.graph_size is not None else out[index, slot]
        return self.lin(out)

    def _sparse_formula(self, h: Tensor, edge_index: Tensor) -> Tensor:
        """``sparse=False``: :math:`\bar M h` as PyG's layer computes it, on sparse matrices of the whole batch
        (torch's COO products in place of ``torch_sparse``'s): the powers are built anew in every layer."""
        with torch.autocast(h.device.type, enabled=False):  # sparse products in fp32 (or fp64), as on the fast path
            return self._sparse_product(h, edge_index)

    def _sparse_product(self, h: Tensor, edge_index: Tensor) -> Tensor:
        n = h.shape[0]
        dtype = torch.float64 if h.dtype == torch.float64 else torch.float32
        ones = torch.ones(edge_index.shape[1], dtype=dtype, device=h.device)
        adj = torch.sparse_coo_tensor(edge_index.flip(0), ones, (n, n)).coalesce()
        loops = torch.arange(n, device=h.device).repeat(2, 1)
        power = torch.sparse_coo_tensor(loops, torch.ones(n, dtype=dtype, device=h.device), (n, n)).coalesce()
        total = power * self.weight[0].to(dtype)
        for i in range(1, self.filter_size + 1):
            power = torch.sparse.mm(power, adj).coalesce()
            total = (total + power * torch.prod(self.weight[: i + 1]).to(dtype)).coalesce()
        rows, cols = total.indices()
        dinv = torch.bincount(rows, minlength=n).to(dtype).rsqrt()  # stored entries per row, >= 1
        matrix = torch.sparse_coo_tensor(total.indices(), dinv[rows] * total.values() * dinv[cols], (n, n))
        return torch.sparse.mm(matrix, h.to(dtype)).to(h.dtype)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, filter_size={self.filter_size}"


def normalised_powers(graph: Graph, filter_size: int, dtype: torch.dtype = torch.float32) -> Tensor:
    r"""``[L + 1, graphs, n, n]`` blocks :math:`\Delta^{-1/2} A^k \Delta^{-1/2}` (``k = 0 .. L``, in ``dtype``), each
    graph padded to the largest one of the batch (:meth:`~engine.models.sparse.Graph.slots`)."""
    src, dst = graph.edge_index
    index, slot, mask, n = graph.slots()
    # walk counts, exact in fp32 at these sizes; each layer casts its matrix to the states' dtype
    adj = torch.zeros(mask.shape[0], n, n, device=src.device, dtype=dtype)
    adj.index_put_((index[dst], slot[dst], slot[src]), torch.ones_like(src, dtype=adj.dtype), accumulate=True)
    eye = torch.eye(n, device=adj.device, dtype=dtype).expand_as(adj)
    powers = [eye]
    for _ in range(filter_size):
        powers.append(torch.bmm(powers[-1], adj))
    stacked = torch.stack(powers)
    reach = (stacked > 0).any(0).sum(-1).to(adj.dtype)  # nodes within L steps, the diagonal included: >= 1
    scale = reach.rsqrt()
    return stacked * scale[None, :, :, None] * scale[None, :, None, :]


@register("pan", "PAN (Ma et al. 2020): path-integral convolution over walks up to filter_size steps")
class PAN(ResidualGNN):
    r"""Path integral based graph network, one :class:`PANConv` (PyG's formula, dense blocks) per block.

    .. math:: c = \Delta^{-1/2} \Big(\sum_{k=0}^{L} \big(\textstyle\prod_{i \le k} w_i\big) A^k\Big)
        \Delta^{-1/2} h \, W + b

    ``L`` = ``filter_size`` (default 2, PyG's example and Ma et al.'s smallest setting). Each graph's powers of
    ``A`` are dense ``n x n`` blocks, which bounds PAN to graphs of a few thousand nodes; the memory they take is
    declared (:meth:`batch_bytes`) so a grid that cannot hold them is refused before it starts.
    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    OPTIONS: ClassVar[dict[str, Option]] = {
        "filter_size": Option(2, positive_int, "L, the longest walk PAN's transition matrix sums over"),
    }

    def __init__(self, *, width: int, filter_size: int = 2, **common: Any) -> None:
        super().__init__(lambda w: PANConv(w, w, filter_size), width=width, **common)
        self.filter_size = filter_size

    @classmethod
    def batch_bytes(cls, options: Mapping[str, Any], graphs: int, nodes: float) -> int:
        """The shared powers ``[L + 1, graphs, n, n]`` with their reach mask, and per layer the weighted matrix and
        its gradient: ``(L + 2 + 2 * layers) * graphs * n^2`` floats."""
        blocks = graphs * math.ceil(nodes) ** 2
        return int((int(options["filter_size"]) + 2 + 2 * int(options["layers"])) * blocks * _FLOAT)
