"""GraphGPS (Rampasek et al. 2022): a local message-passing layer and global self-attention in every layer.

Each layer is PyG's :class:`~torch_geometric.nn.GPSConv` (its parameters, and its forward as the ``sparse=False``
path); the fast path computes the same function with the shared sparse products for the local layer and one
batched :func:`torch.nn.functional.scaled_dot_product_attention` for the global one. Attention is masked per
graph: a node attends to the nodes of its own graph only, never to another graph of the batch (for G and G~ of
an alignment pair that would let the model read the answer). When every graph of the batch has the same number
of nodes and they lie in order (alignment pairs of a fixed-order base), the node states are viewed as
``[graphs, nodes, width]`` with no padding and no mask; otherwise graphs are padded to the largest one and the
padding is masked out of the keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GatedGraphConv, GINEConv, GPSConv, ResGatedGraphConv

from engine.models.base import Option, ResidualGNN, choice, positive_int, probability, register
from engine.models.gat import HeadsSplitWidth
from engine.models.graph_norm import graph_norm
from engine.models.sparse import Graph, GraphLayer, convolve

#: The local message-passing layers a GPS layer may use.
LOCALS = ("gine", "gatedgcn", "ggnn")
#: Heads asked for by default (GPS's ZINC and PCQM4Mv2 configurations use 4 and 8).
DEFAULT_HEADS = 4
#: Bytes per fp32 score.
_FLOAT = 4


def _local(kind: str, width: int, activation: str) -> nn.Module:
    if kind == "gatedgcn":
        return ResGatedGraphConv(width, width)
    if kind == "ggnn":
        return GatedGraphConv(width, num_layers=1)
    act = nn.GELU if activation == "gelu" else nn.ReLU
    return GINEConv(nn.Sequential(nn.Linear(width, width), act(), nn.Linear(width, width)))


class GPSLayer(GraphLayer):
    r"""One GPS layer: PyG's :class:`~torch_geometric.nn.GPSConv` around a local layer.

    With :math:`\operatorname{MPNN}` the local layer, :math:`\operatorname{MHA}` multi-head self-attention over
    the nodes of each graph and :math:`\operatorname{N}_1, \operatorname{N}_2, \operatorname{N}_3` the norms:

    .. math::
        h_L = \operatorname{N}_1(h + \operatorname{MPNN}(h, A)), \qquad
        h_G = \operatorname{N}_2(h + \operatorname{MHA}(h)), \qquad
        h' = \operatorname{N}_3\big(h_L + h_G + \operatorname{MLP}(h_L + h_G)\big)

    (dropout on each update before its residual sum; the MLP is ``width -> 2 width -> width``). For ``gine``
    the graphs have no edge features, so every edge carries one learned embedding ``e [width]``.
    """

    def __init__(
        self,
        width: int,
        *,
        local: str,
        heads: int,
        dropout: float,
        attn_dropout: float,
        activation: str,
        norm: str,
    ) -> None:
        super().__init__()
        self.local = local
        self.conv = GPSConv(
            width,
            _local(local, width, activation),
            heads=heads,
            dropout=dropout,
            act=activation,
            norm="graph_norm" if norm == "per-graph" else "batch_norm",
            attn_kwargs={"dropout": attn_dropout},
        )
        self.edge = nn.Parameter(torch.empty(width)) if local == "gine" else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()
        if self.edge is not None:
            nn.init.normal_(self.edge, std=1 / math.sqrt(self.edge.shape[0]))

    def forward(self, h: Tensor, graph: Graph, fast: bool = True) -> Tensor:
        if not fast:
            kwargs = {}
            if self.edge is not None:
                kwargs["edge_attr"] = self.edge.expand(graph.edge_index.shape[1], -1)
            return self.conv(h, graph.edge_index, graph.batch, **kwargs)
        gps = self.conv
        local = convolve(gps.conv, h, graph, self.edge)
        local = self._norm(gps.norm1, F.dropout(local, gps.dropout, self.training) + h, graph)
        attended = self._norm(gps.norm2, F.dropout(attend(gps.attn, h, graph), gps.dropout, self.training) + h, graph)
        out = local + attended
        return self._norm(gps.norm3, out + gps.mlp(out), graph)

    @staticmethod
    def _norm(norm: nn.Module, h: Tensor, graph: Graph) -> Tensor:
        if hasattr(norm, "mean_scale"):  # GraphNorm: per graph, over a [graphs, nodes, width] view when it can
            return graph_norm(norm, h, graph)
        return norm(h)


def attend(attn: nn.MultiheadAttention, h: Tensor, graph: Graph) -> Tensor:
    r"""``nn.MultiheadAttention(h, h, h)`` over the nodes of each graph of ``graph``, as one batched
    :func:`~torch.nn.functional.scaled_dot_product_attention`:

    .. math:: \operatorname{MHA}(h) = \big\Vert_{k=1}^{K} \operatorname{softmax}\Big(\frac{Q_k K_k^\top}
        {\sqrt{d}}\Big) V_k \; W_O + b_O, \qquad Q_k, K_k, V_k = h W^{Q,K,V}_k + b^{Q,K,V}_k

    per graph (:math:`d` = width / heads). ``h [N, width]`` -> ``[N, width]``.
    """
    heads, width = attn.num_heads, attn.embed_dim
    n = graph.graph_size
    mask = None
    if n is not None:  # equal graphs in order: a view, no padding, no mask
        dense = h.view(-1, n, width)
    else:
        index, slot, mask, nodes = graph.slots()
        dense = h.new_zeros(mask.shape[0], nodes, width).index_put((index, slot), h)
    graphs, nodes = dense.shape[0], dense.shape[1]
    q, k, v = F.linear(dense, attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (t.reshape(graphs, nodes, heads, width // heads).transpose(1, 2) for t in (q, k, v))
    keys = None if mask is None else mask[:, None, None, :]
    p = attn.dropout if attn.training else 0.0
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=p)
    out = attn.out_proj(out.transpose(1, 2).reshape(graphs, nodes, width))
    return out.reshape(-1, width) if mask is None else out[index, slot]


@register("graphgps", "GraphGPS (Rampasek et al. 2022): local MPNN (gine) + global attention per graph (4 heads)")
class GraphGPS(HeadsSplitWidth, ResidualGNN):
    r"""GraphGPS: ``layers`` GPS layers (:class:`GPSLayer`), each a local message-passing layer and multi-head
    self-attention over the nodes of each graph, summed, then an MLP, with residuals and norms as in
    Rampasek et al. (their Eq. 2-4)::

        h_L = N1(h + Dropout(MPNN(h, A)))
        h_G = N2(h + Dropout(MHA(h)))          # attention within each graph only
        h'  = N3(h_L + h_G + MLP(h_L + h_G))

    ``local`` picks the MPNN (``gine``: GIN with one learned edge embedding, GPS's default; ``gatedgcn``:
    ``ResGatedGraphConv``; ``ggnn``: one ``GatedGraphConv`` step). ``heads`` (default 4; the width must be a
    multiple) and ``attn_dropout`` (on the attention weights) configure the attention; ``dropout`` is GPS's on
    every update. The norms follow the model's ``norm``: ``per-graph`` (gaptui's default) makes N1-N3
    :class:`~torch_geometric.nn.GraphNorm` per graph, so no embedding depends on the other graphs of the batch;
    ``whole-batch`` makes them the paper's BatchNorm. The scaffold puts no norm, activation or residual of its own
    around a GPS layer, so ``block`` does not apply; ``activation`` is the MLP's (and GINE's).

    The input layer (``input_layer``) and the linear readout are the scaffold's. Positional encodings enter as node
    inputs (the run option ``features``, e.g. ``degree+rwpe:16`` or ``degree+lap:8``).

    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``; attention scores are
    ``[graphs, heads, n, n]`` per layer (:meth:`batch_bytes`). ``reset_parameters()`` re-initialises every layer.
    """

    OPTIONS: ClassVar[dict[str, Option]] = {
        "local": Option("gine", choice(LOCALS), "the local message-passing layer of every GPS layer"),
        "heads": Option(DEFAULT_HEADS, positive_int, "attention heads (width must be a multiple)"),
        "attn_dropout": Option(0.0, probability, "dropout on the attention weights"),
    }
    why_multiple: ClassVar[str] = "attention heads split the width, head dim = width / heads"
    layer_is_block: ClassVar[bool] = True

    def __init__(
        self,
        *,
        width: int,
        local: str = "gine",
        heads: int = DEFAULT_HEADS,
        attn_dropout: float = 0.0,
        **common: Any,
    ) -> None:
        if width % heads:
            raise ValueError(f"GraphGPS: width {width} is not a multiple of heads={heads}")

        def layer(w: int) -> nn.Module:
            return GPSLayer(
                w,
                local=local,
                heads=heads,
                dropout=float(common.get("dropout", 0.0)),
                attn_dropout=attn_dropout,
                activation=common.get("activation", "relu"),
                norm=common.get("norm", "per-graph"),
            )

        super().__init__(layer, width=width, **common)
        self.local, self.heads, self.attn_dropout = local, heads, attn_dropout

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, local={self.local}, heads={self.heads}"

    @classmethod
    def batch_bytes(cls, options: Mapping[str, Any], graphs: int, nodes: float) -> int:
        """The attention scores of every layer, ``graphs x heads x n^2``, twice (the probabilities kept for the
        backward pass and their gradient), in fp32."""
        scores = graphs * int(options["heads"]) * math.ceil(nodes) ** 2
        return int(2 * int(options["layers"]) * scores * _FLOAT)
