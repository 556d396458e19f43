"""Attention models: GAT and GATv2, multi-head with the heads concatenated back to the block width.

The width must be a multiple of the head count (head dim = width / heads). With 8 heads the parameter
count moves in steps of roughly 16/width of itself (32/width for GATv2) as the width steps by 8, which at
small budgets is wider than the 5% budget tolerance. So when the user did not pin ``heads``, the budget
search may fall back to the largest head count below 8 whose widths do land within tolerance; the head
count used is in ``model.heads``. A user-given ``heads`` is kept as is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

from torch import nn
from torch_geometric.nn import GATConv, GATv2Conv

from engine.models.base import Option, ResidualGNN, positive_int, register

#: Head count asked for by default (the paper's GAT and GATv2 use 8).
DEFAULT_HEADS = 8


class HeadsSplitWidth:
    """Mixin of models whose width is split over ``heads`` attention heads: widths are multiples of the head count,
    and the budget search may lower an unpinned head count (one at a time, to stay as close to the default as the
    budget lets) when no width at the default lands within tolerance."""

    @classmethod
    def width_multiple(cls, options: Mapping[str, Any]) -> int:
        return int(options["heads"])

    @classmethod
    def budget_variants(cls, options: Mapping[str, Any], explicit: set[str]) -> Iterator[dict[str, Any]]:
        if "heads" in explicit:
            yield dict(options)
            return
        # Fewer heads = finer width steps; go down one at a time so we stay as close to the default as we can.
        for heads in range(int(options["heads"]), 0, -1):
            yield {**options, "heads": heads}


class _MultiHead(HeadsSplitWidth, ResidualGNN):
    """Shared logic of the attention models: ``heads`` option, width divisibility, head-count fallback."""

    OPTIONS: ClassVar[dict[str, Option]] = {
        "heads": Option(DEFAULT_HEADS, positive_int, "attention heads, concatenated (width must divide)"),
    }
    why_multiple: ClassVar[str] = "heads are concatenated, head dim = width / heads"

    def __init__(self, conv: Callable[[int, int], nn.Module], *, width: int, heads: int, **common: Any) -> None:
        if width % heads:
            raise ValueError(f"{type(self).__name__}: width {width} is not a multiple of heads={heads}")
        super().__init__(lambda w: conv(w, heads), width=width, **common)
        self.heads = heads

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, heads={self.heads}"


@register("gat", "GAT (Velickovic et al. 2018): multi-head attention over neighbours (8 heads by default)")
class GAT(_MultiHead):
    r"""Graph attention network, one :class:`~torch_geometric.nn.GATConv` (heads concatenated) per block.

    For each head :math:`k = 1..K` (head dim :math:`\mathrm{width}/K`), over :math:`j \in N(i) \cup \{i\}`:

    .. math:: \alpha^k_{ij} = \operatorname{softmax}_j\big(\operatorname{LeakyReLU}(a_s^{k\top} W^k h_j
        + a_t^{k\top} W^k h_i)\big), \qquad
        c_i = \big\Vert_{k=1}^{K} \sum_j \alpha^k_{ij} W^k h_j + b

    Structure-blind on constant input (alignment's ``x = 1``): attention weights sum to one, so over identical
    neighbour states every node of a graph gets the same embedding in exact arithmetic (in float32 what
    remains is rounding noise that GraphNorm amplifies). Give it structural input features to align with it.

    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    def __init__(self, *, width: int, heads: int = DEFAULT_HEADS, **common: Any) -> None:
        super().__init__(lambda w, k: GATConv(w, w // k, heads=k, concat=True), width=width, heads=heads, **common)


@register("gatv2", "GATv2 (Brody et al. 2022): dynamic multi-head attention (8 heads by default)")
class GATv2(_MultiHead):
    r"""GATv2, one :class:`~torch_geometric.nn.GATv2Conv` (heads concatenated) per block.

    For each head :math:`k = 1..K` (head dim :math:`\mathrm{width}/K`), over :math:`j \in N(i) \cup \{i\}`:

    .. math:: \alpha^k_{ij} = \operatorname{softmax}_j\big(a^{k\top} \operatorname{LeakyReLU}(W_s^k h_j
        + W_t^k h_i)\big), \qquad
        c_i = \big\Vert_{k=1}^{K} \sum_j \alpha^k_{ij} W_s^k h_j + b

    Structure-blind on constant input (alignment's ``x = 1``): attention weights sum to one, so over identical
    neighbour states every node of a graph gets the same embedding in exact arithmetic (in float32 what
    remains is rounding noise that GraphNorm amplifies). Give it structural input features to align with it.

    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    def __init__(self, *, width: int, heads: int = DEFAULT_HEADS, **common: Any) -> None:
        super().__init__(lambda w, k: GATv2Conv(w, w // k, heads=k, concat=True), width=width, heads=heads, **common)
