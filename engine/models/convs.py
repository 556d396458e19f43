"""Models whose block is one plain PyG convolution: GCN, GIN, GraphSAGE, residual gated GCN and GGNN.

Each class only chooses its convolution; see :class:`~engine.models.base.ResidualGNN` for the block
scaffold (residual sum, per-graph GraphNorm, ReLU), ``reset_parameters`` and the forward contract.
Notation below: :math:`h_i` is node :math:`i`'s width-dimensional state entering a block, :math:`N(i)` its
neighbours, and the block output is :math:`h_i + \\operatorname{ReLU}(\\operatorname{GraphNorm}(c_i))`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn
from torch_geometric.nn import GatedGraphConv, GCNConv, GINConv, ResGatedGraphConv, SAGEConv

from engine.models.base import Option, ResidualGNN, boolean, positive_int, register


@register("gcn", "GCN (Kipf & Welling 2017): symmetric-normalised neighbourhood mean with self-loops")
class GCN(ResidualGNN):
    r"""Graph convolutional network, one :class:`~torch_geometric.nn.GCNConv` per block.

    .. math:: c_i = \sum_{j \in N(i) \cup \{i\}} \frac{1}{\sqrt{\hat d_i \hat d_j}} W h_j + b,
        \qquad \hat d_i = 1 + |N(i)|

    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    def __init__(self, *, width: int, **common: Any) -> None:
        super().__init__(lambda w: GCNConv(w, w), width=width, **common)


@register("gin", "GIN (Xu et al. 2019): sum aggregation followed by a 2-layer MLP")
class GIN(ResidualGNN):
    r"""Graph isomorphism network, one :class:`~torch_geometric.nn.GINConv` with a 2-layer MLP per block.

    .. math:: c_i = W_2\,\operatorname{ReLU}\Big(W_1\big((1 + \epsilon)\,h_i + \sum_{j \in N(i)} h_j\big)
        + b_1\Big) + b_2

    (GELU in place of ReLU with ``activation="gelu"``.)
    :math:`\epsilon = 0` unless ``train_eps=True`` makes it a learned scalar per block. With
    ``input_layer="conv"`` the first layer is ``GINConv(Linear(in_dim, width))``, as in the paper's package.
    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    OPTIONS: ClassVar[dict[str, Option]] = {
        "train_eps": Option(False, boolean, "learn GIN's epsilon (one scalar per block)"),
    }

    def __init__(self, *, width: int, train_eps: bool = False, **common: Any) -> None:
        activation = nn.GELU if common.get("activation") == "gelu" else nn.ReLU

        def conv(w: int) -> nn.Module:
            mlp = nn.Sequential(nn.Linear(w, w), activation(), nn.Linear(w, w))
            return GINConv(mlp, train_eps=train_eps)

        def first(in_dim: int, w: int) -> nn.Module:
            return GINConv(nn.Linear(in_dim, w), train_eps=train_eps)

        super().__init__(conv, width=width, first=first, **common)
        self.train_eps = train_eps


@register(
    "gatedgcn",
    "Residual gated graph convnet (Bresson & Laurent 2017), PyG ResGatedGraphConv: sigmoid edge gates",
)
class GatedGCN(ResidualGNN):
    r"""Bresson & Laurent's residual gated graph convnet, one :class:`~torch_geometric.nn.ResGatedGraphConv`.

    This is the "GatedGCN" the paper's text cites. (The paper's own package trained Li et al.'s gated graph
    network under that name; that model is registered here as ``ggnn``.)

    .. math:: c_i = W_1 h_i + \sum_{j \in N(i)} \eta_{ij} \odot W_2 h_j, \qquad
        \eta_{ij} = \sigma(W_3 h_i + W_4 h_j)

    (each :math:`W_k` with its bias). The paper's residual connection and normalisation are the scaffold's.
    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    def __init__(self, *, width: int, **common: Any) -> None:
        super().__init__(lambda w: ResGatedGraphConv(w, w), width=width, **common)


@register("ggnn", "Gated graph NN (Li et al. 2016), PyG GatedGraphConv: GRU update of summed messages")
class GGNN(ResidualGNN):
    r"""Li et al.'s gated graph network, one :class:`~torch_geometric.nn.GatedGraphConv` step per block.

    The paper's own package trained this layer under the name "GatedGCN". Li et al. unroll one GRU cell
    shared over all propagation steps; here each block is ``GatedGraphConv(width, num_layers=1)`` with its
    own weights, so the model is built like every other one (same scaffold, one step per block, depth =
    ``layers``) and the comparison is at equal depth and budget. Weight sharing across blocks would need a
    different budget search and breaks the one-block-one-conv structure, hence this choice.

    ``steps=2`` gives each block two propagation steps (own weights per step, one GRU per block), which with
    ``input_layer="conv"`` and ``norm="whole-batch"`` at width 48 is the paper's "GatedGCN" of Table C.2
    (59,680 parameters).

    .. math:: m_i = \sum_{j \in N(i)} W h_j, \qquad c_i = \operatorname{GRU}(m_i, h_i)

    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    OPTIONS: ClassVar[dict[str, Option]] = {
        "steps": Option(1, positive_int, "GRU propagation steps inside each block (the paper's package: 2)"),
    }

    def __init__(self, *, width: int, steps: int = 1, **common: Any) -> None:
        super().__init__(lambda w: GatedGraphConv(w, num_layers=steps), width=width, **common)
        self.steps = steps


@register("sage", "GraphSAGE (Hamilton et al. 2017): root weight plus mean of neighbours")
class SAGE(ResidualGNN):
    r"""GraphSAGE with mean aggregation, one :class:`~torch_geometric.nn.SAGEConv` per block.

    .. math:: c_i = W_1 h_i + W_2 \frac{1}{|N(i)|} \sum_{j \in N(i)} h_j + b

    Structure-blind on constant input (alignment's ``x = 1``): a mean of identical neighbour states is that
    state, so every node of a graph gets the same embedding in exact arithmetic (in float32 what remains is
    rounding noise that GraphNorm amplifies). Give it structural input features to align with it.

    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    def __init__(self, *, width: int, **common: Any) -> None:
        super().__init__(lambda w: SAGEConv(w, w), width=width, **common)
