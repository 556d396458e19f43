"""Training options of the property study (kept free of torch, so specs and presets load fast)."""

from __future__ import annotations

from dataclasses import dataclass

#: Cycle lengths k = 1 .. CYCLE_K of the ID-GNN-Fast node features ``diag(A^k)``.
CYCLE_K = 6


@dataclass(frozen=True)
class TrainOptions:
    """The study's training: AdamW (``lr``, ``weight_decay``), ``batch_size``, ``epochs``; the backbone's width
    (``hidden``), GIN ``layers`` and cycle features up to length ``cycle_k``; ``precision`` (``auto``, ``fp32``,
    ``bf16``: the forward pass under autocast, see :func:`engine.hardware.resolve_precision`)."""

    epochs: int = 20
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    hidden: int = 64
    layers: int = 5
    cycle_k: int = CYCLE_K
    precision: str = "auto"
