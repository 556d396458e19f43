"""The downstream model of GAPE (the graph alignment paper, appendix F.2.2): a plain transformer encoder over atom
tokens.

.. math::

    h^{(0)}_i = \\operatorname{Emb}(t_i) + W_{pe} p_i + b_{pe}, \\qquad
    H = \\operatorname{TransformerEncoder}(H^{(0)}), \\qquad
    \\hat y = w^\\top \\frac{1}{n} \\sum_{i < n} h_i + b

with ``t_i`` the atom type and ``p_i`` the positional encoding of atom ``i`` (no projection without one).
Padding atoms are masked as attention **keys** (``src_key_padding_mask``), so no real atom ever attends to
padding, and the mean runs over real atoms only: a molecule's prediction does not depend on how much padding
its batch needed. (Masking queries instead, as the paper's package did, lets padding leak into every atom.)

Shapes: ``atoms [B, L]`` long, ``pe [B, L, pe_dim]`` float, ``mask [B, L]`` bool (True: real atom) -> ``[B]``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from engine.errors import GaptuiError
from engine.models.base import count_parameters

#: Allowed relative distance between the parameter count and the budget (as for the alignment models).
TOLERANCE = 0.05


class MoleculeTransformer(nn.Module):
    """Atom embedding + projected PE -> ``nn.TransformerEncoder`` (batch-first, post-norm as ``nn.Transformer``)
    -> mean over real atoms -> linear head. ``ff`` is the feed-forward width of each layer."""

    def __init__(
        self,
        *,
        width: int,
        num_atom_types: int,
        pe_dim: int = 0,
        layers: int = 12,
        heads: int = 8,
        ff: int | None = None,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        self.width, self.layers, self.heads, self.pe_dim = width, layers, heads, pe_dim
        self.ff = ff or 2 * width
        self.atoms = nn.Embedding(num_atom_types, width)
        self.pe = nn.Linear(pe_dim, width) if pe_dim else None
        layer = nn.TransformerEncoderLayer(width, heads, self.ff, dropout, batch_first=True)
        # Nested tensors are an inference fast path that drops padded positions; plain tensors keep eval and train
        # on one code path.
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, 1)
        self.num_parameters = count_parameters(self)

    def forward(self, atoms: Tensor, pe: Tensor | None, mask: Tensor) -> Tensor:
        h = self.atoms(atoms)
        if self.pe is not None and pe is not None:
            h = h + self.pe(pe)
        h = self.encoder(h, src_key_padding_mask=~mask)
        real = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * real).sum(dim=1) / real.sum(dim=1).clamp(min=1.0)
        return self.head(pooled).squeeze(-1)


def _count(width: int, ff: int, **kwargs: int | float) -> int:
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        return count_parameters(MoleculeTransformer(width=width, ff=ff, **kwargs))  # type: ignore[arg-type]


def build_transformer(
    *, budget: int, num_atom_types: int, pe_dim: int, layers: int, heads: int, dropout: float, width: int | None = None
) -> MoleculeTransformer:
    """A :class:`MoleculeTransformer` whose trainable parameter count is within :data:`TOLERANCE` of ``budget``.

    The width is the multiple of ``heads`` whose count with ``ff = 2 * width`` is closest to the budget; the
    feed-forward width (to which the count is linear) then absorbs the rest, so the count lands within a few
    parameters of the budget whatever the head count. ``width`` pins the width (``ff`` still fills the budget).
    """
    dims = {"num_atom_types": num_atom_types, "pe_dim": pe_dim, "layers": layers, "heads": heads, "dropout": dropout}
    if width is None:
        best: tuple[int, int] | None = None
        k = 1
        while True:
            count = _count(heads * k, 2 * heads * k, **dims)
            if best is None or abs(count - budget) < abs(best[1] - budget):
                best = (heads * k, count)
            if count >= budget or k > 4096:
                break
            k += 1
        width = best[0]
    slope = _count(width, 2, **dims) - _count(width, 1, **dims)
    base = _count(width, 1, **dims) - slope
    ff = max(1, round((budget - base) / slope))
    count = base + slope * ff
    if abs(count - budget) > TOLERANCE * budget:
        raise GaptuiError(
            f"transformer: no width gives {budget:,} parameters within {TOLERANCE:.0%} "
            f"(width {width}, {layers} layers, {heads} heads: at least {base + slope:,}); raise the budget"
        )
    return MoleculeTransformer(width=width, ff=ff, **dims)  # type: ignore[arg-type]
