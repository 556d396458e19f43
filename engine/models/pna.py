"""PNA (Corso et al. 2020): several aggregators, each rescaled by functions of the node degree.

PNA's degree scalers divide by the average (log-)degree of the training graphs, so the layer needs the
training set's in-degree histogram ``deg`` (``deg[d]`` = number of nodes of degree ``d``). Pass it as
``deg=`` (a tensor or list; :func:`degree_histogram` computes one); the default is uniform over degrees
0..16, a neutral guess that keeps the scalers of order 1 on sparse graphs.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch_geometric.nn import PNAConv
from torch_geometric.utils import degree

from engine.models.base import Option, ResidualGNN, positive_int, register

AGGREGATORS = ["mean", "min", "max", "std"]
SCALERS = ["identity", "amplification", "attenuation"]
#: Default degree histogram: uniform over degrees 0..16.
DEFAULT_MAX_DEGREE = 16


def degree_histogram(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Histogram of in-degrees, ``[max_degree + 1]`` long: the ``deg`` PNA expects.

    For a training set, pass the concatenated (batched) ``edge_index`` and total node count.
    """
    in_degree = degree(edge_index[1], num_nodes=num_nodes, dtype=torch.long)
    return torch.bincount(in_degree, minlength=1)


def degree_counts(value: Any) -> tuple[float, ...] | None:
    """Check a ``deg`` histogram; a tuple (hashable, so budget searches can be cached) or ``None``."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        if value.dim() != 1 or value.is_complex():
            raise ValueError("expected a 1-D histogram of node counts per degree")
        value = value.detach().cpu().tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError("expected a 1-D histogram (tensor or list) of node counts per degree")
    counts = []
    for count in value:
        if isinstance(count, bool) or not isinstance(count, numbers.Real) or count < 0:
            raise ValueError("expected non-negative node counts per degree")
        counts.append(float(count))
    if not counts or sum(counts) <= 0:
        raise ValueError("expected a histogram with at least one node")
    return tuple(counts)


@register("pna", "PNA (Corso et al. 2020): mean/min/max/std aggregators x degree scalers")
class PNA(ResidualGNN):
    r"""Principal neighbourhood aggregation, one :class:`~torch_geometric.nn.PNAConv` per block.

    With aggregators :math:`\mu, \min, \max, \sigma` over :math:`N(i)` and scalers
    :math:`S(d, \alpha) = (\log(d + 1) / \delta)^\alpha`, :math:`\alpha \in \{0, 1, -1\}` (identity,
    amplification, attenuation), :math:`\delta` the mean of :math:`\log(d+1)` under ``deg``:

    .. math:: m_{ij} = U [h_i \Vert h_j], \qquad
        c_i = L\Big(V\big[h_i \,\Vert\, \big\Vert_{\alpha} S(d_i, \alpha)
        \big\Vert_{\oplus \in \{\mu,\min,\max,\sigma\}} \oplus_{j \in N(i)} m_{ij}\big]\Big)

    (:math:`U, V, L` linear with bias; ``towers`` > 1 splits :math:`V` and the output into towers).
    Shapes: ``x [N, in_dim]``, ``edge_index [2, E]``, ``batch [N]`` -> ``[N, out_dim]``.
    ``reset_parameters()`` re-initialises every layer (inherited).
    """

    OPTIONS: ClassVar[dict[str, Option]] = {
        "deg": Option(None, degree_counts, "in-degree histogram of the training graphs (default uniform 0..16)"),
        "towers": Option(1, positive_int, "PNA towers (width must be a multiple)"),
    }
    why_multiple: ClassVar[str] = "PNA splits its output into towers"

    def __init__(
        self,
        *,
        width: int,
        deg: Tensor | Sequence[float] | None = None,
        towers: int = 1,
        **common: Any,
    ) -> None:
        if width % towers:
            raise ValueError(f"PNA: width {width} is not a multiple of towers={towers}")
        counts = degree_counts(deg)
        hist = (
            torch.ones(DEFAULT_MAX_DEGREE + 1, device="cpu") if counts is None else torch.tensor(counts, device="cpu")
        )
        super().__init__(lambda w: PNAConv(w, w, AGGREGATORS, SCALERS, deg=hist, towers=towers), width=width, **common)
        self.towers = towers
        # Kept so that a rebuilt model (e.g. from a saved run config) gets the same scalers.
        self.register_buffer("deg", hist, persistent=False)

    @classmethod
    def width_multiple(cls, options: Mapping[str, Any]) -> int:
        return int(options["towers"])
