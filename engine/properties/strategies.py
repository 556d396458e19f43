"""Training strategies of the property study (the property benchmark, section 4.3): what a trained cell sees while
it trains.

=====================  ==========================================================================================
strategy               what changes (everything else as ``standard``)
=====================  ==========================================================================================
``standard``           train on the cell's training family at the base size; test at every larger size.
``finetune_perturb``   train on GraphRandom-Train (base size) for ``epochs - round(finetune_share * epochs)`` epochs,
                       then on GraphPerturb-Train (base size) for the rest, with the same optimiser. One training
                       serves ``generalisation`` (tested on GraphRandom-Test) and ``sensitivity`` (tested on
                       GraphPerturb-Test). ``robustness`` is not defined for it: the model has seen GraphPerturb.
``progressive``        the training set spans sizes ``base .. base + progressive_k`` of the cell's training family,
                       ``graphs // (k + 1)`` graphs of each (rounded down to even), so it holds as many graphs as a
                       standard one; size ``base + j`` enters at epoch ``1 + floor(j * epochs / (k + 1))`` and
                       each epoch feeds its sizes smallest first. Its test sizes are those above ``base + k``: no
                       size it trained on is evaluated, so its U is over fewer (and larger) sizes than a standard
                       cell's; compare strategies on the common sizes (``acc_n<n>``).
``adversarial``        each training batch also holds, for a share ``adversarial_share`` of its graphs, a copy with
                       1 or 2 random cells flipped, labelled by the property's own checker
                       (:mod:`engine.properties.definitions`, the one that labels the datasets).
=====================  ==========================================================================================

No strategy reads a test file: the sizes a cell trains on (:func:`train_sizes`) and those it is tested on
(:func:`test_sizes`) are disjoint, and the test families are read only by the evaluation.
"""

from __future__ import annotations

import numpy as np

from engine.errors import GaptuiError, unknown

STRATEGIES = ("standard", "finetune_perturb", "progressive", "adversarial")
#: The cell options each strategy reads (hashed only for it).
STRATEGY_OPTIONS: dict[str, tuple[str, ...]] = {
    "standard": (),
    "finetune_perturb": ("finetune_share",),
    "progressive": ("progressive_k",),
    "adversarial": ("adversarial_share",),
}
ALL_STRATEGY_OPTIONS = ("finetune_share", "progressive_k", "adversarial_share")


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise unknown("training strategy", strategy, STRATEGIES)
    return strategy


def trained_by(strategy: str) -> dict[str, str]:
    """dimension -> the dimension whose trained model it tests (it trains nothing itself)."""
    if check_strategy(strategy) == "finetune_perturb":
        return {"sensitivity": "generalisation"}
    return {"robustness": "generalisation"}


def dimensions_for(strategy: str) -> tuple[str, ...]:
    """The dimensions a strategy measures (finetune_perturb has no robustness: its model saw GraphPerturb)."""
    all_three = ("generalisation", "sensitivity", "robustness")
    return all_three[:2] if check_strategy(strategy) == "finetune_perturb" else all_three


def train_sizes(sizes: list[int], strategy: str, progressive_k: int) -> list[int]:
    """The sizes (of the property's ``sizes``, base first) a cell trains on."""
    count = 1 + progressive_k if check_strategy(strategy) == "progressive" else 1
    if count == 1 and len(sizes) < 2:
        raise GaptuiError(f"sizes = {len(sizes)}: a cell needs the base size and one larger size")
    if count >= len(sizes):
        raise GaptuiError(
            f"progressive_k = {progressive_k}: training on sizes {sizes[0]}..{sizes[0] + progressive_k} leaves no "
            f"larger test size among {sizes[0]}..{sizes[-1]} (raise sizes or lower progressive_k)"
        )
    return sizes[:count]


def test_sizes(sizes: list[int], strategy: str, progressive_k: int) -> list[int]:
    """The sizes a cell is tested on: every size above the largest it trained on."""
    largest = train_sizes(sizes, strategy, progressive_k)[-1]
    return [n for n in sizes if n > largest]


def finetune_epochs(epochs: int, share: float) -> int:
    """Epochs of the GraphPerturb fine-tuning (the last ones); at least 1 and at most ``epochs - 1``."""
    if epochs < 2:
        raise GaptuiError(f"finetune_perturb needs epochs >= 2 (one before and one of fine-tuning), got {epochs}")
    return min(epochs - 1, max(1, round(share * epochs)))


def entry_epoch(j: int, k: int, epochs: int) -> int:
    """The 1-based epoch at which size ``base + j`` joins a progressive training set (size ``base`` at epoch 1)."""
    return 1 + (j * epochs) // (k + 1)


def check_options(finetune_share: float, progressive_k: int, adversarial_share: float, where: str) -> None:
    if not 0.0 < finetune_share < 1.0:
        raise GaptuiError(f"{where}: finetune_share = {finetune_share}: expected a share strictly between 0 and 1")
    if progressive_k < 1:
        raise GaptuiError(f"{where}: progressive_k = {progressive_k} must be >= 1")
    if not 0.0 < adversarial_share <= 1.0:
        raise GaptuiError(f"{where}: adversarial_share = {adversarial_share}: expected a share in (0, 1]")


def flip_cells(adjacency: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A copy of each ``[n, n]`` graph of ``adjacency`` (``[G, n, n]`` bool) with 1 or 2 distinct cells flipped
    (half the graphs, drawn at random, get 2; self-loop cells included, as in GraphPerturb)."""
    g, n, _ = adjacency.shape
    out = adjacency.copy()
    flat = out.reshape(g, n * n)
    two = rng.random(g) < 0.5
    for i in range(g):
        cells = rng.choice(n * n, size=2 if two[i] and n * n > 1 else 1, replace=False)
        flat[i, cells] = ~flat[i, cells]
    return out


def adversarial_batch(
    adjacency: np.ndarray, share: float, check, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Flipped copies of ``ceil(share * G)`` graphs of the batch, drawn at random, and their labels from ``check``
    (the property's checker: ``[G, n, n]`` bool -> ``[G]`` bool), never assumed from the original's."""
    g = adjacency.shape[0]
    pick = rng.choice(g, size=max(1, int(np.ceil(share * g))), replace=False)
    flipped = flip_cells(adjacency[pick], rng)
    return flipped, np.asarray(check(flipped), dtype=bool)


class Strategy:
    """A strategy and the options it reads (a plain value: equal strategies compare equal)."""

    __slots__ = ("name", "finetune_share", "progressive_k", "adversarial_share")

    def __init__(
        self,
        name: str = "standard",
        finetune_share: float = 0.5,
        progressive_k: int = 2,
        adversarial_share: float = 0.5,
    ) -> None:
        self.name = check_strategy(name)
        self.finetune_share, self.progressive_k, self.adversarial_share = (
            finetune_share,
            progressive_k,
            adversarial_share,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Strategy) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def key(self) -> tuple:
        return (self.name, *(getattr(self, k) for k in STRATEGY_OPTIONS[self.name]))

    def __repr__(self) -> str:
        return f"Strategy{self.key()}"


STANDARD = Strategy()
