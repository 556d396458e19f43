"""Memory estimates, checked before anything large is allocated.

Two things grow with the parameters: a dataset (its arrays while it is generated and saved) and a training batch
(the dense similarity ``S [B, Nmax, Nmax]`` with its softmax and gradient). Both are estimated from the spec
alone; a plan that cannot fit in the machine's memory is refused in one line with the estimate and the
machine's total, before minutes are spent generating.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from engine.errors import GaptuiError

#: Bytes per int64 index; node ids are held as int64 while a dataset is built and trained on.
_INT = 8
#: Float32 copies of ``S`` alive during one training step: scores, masked scores, log-softmax, gradient.
_SIM_COPIES = 4
#: Peak over the saved size while generating (edge lists of G and H, sorting, per-graph temporaries).
_BUILD_OVERHEAD = 3


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a dataset build and one training batch need, from the mean graph of the dataset."""

    nodes: float
    mean_degree: float
    pairs: int
    dataset_bytes: int
    generation_bytes: int
    batch_bytes: int | None

    @property
    def peak(self) -> int:
        return max(self.dataset_bytes + self.generation_bytes, self.dataset_bytes + (self.batch_bytes or 0))

    def describe(self) -> str:
        text = f"dataset about {human(self.dataset_bytes + self.generation_bytes)}"
        if self.batch_bytes is not None:
            text += f", training batch about {human(self.batch_bytes)}"
        return text


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def machine_memory() -> int | None:
    """Total physical memory in bytes (None where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def estimate(canonical: dict[str, Any], batch_size: int | None = None) -> MemoryEstimate | None:
    """The estimate for a canonical dataset spec (and a batch of ``batch_size`` pairs); None when the source
    cannot tell its graph sizes before loading them (real and user datasets, whose size is what it is)."""
    from engine.sources import SOURCES, parse_params

    source_cls = SOURCES.get(canonical["base"])
    hint = source_cls.size_hint(parse_params(source_cls, canonical["params"]))
    if hint is None:
        return None
    nodes, degree, dense = hint
    pairs = int(canonical["n_train"] or 0) + int(canonical["n_val"] or 0)
    # per pair: G and H edge lists (both directions, 2 rows), their pointers, the permutation and the order
    noisy_degree = degree * (1 + canonical["noise"])
    per_pair = (2 * 2 * nodes * (degree + noisy_degree) / 2 + nodes + 4) * _INT
    dataset = int(pairs * per_pair)
    # sources that draw a whole n x n matrix per graph, and the pair table of dense Bernoulli draws
    generation = int(max(_BUILD_OVERHEAD * dataset / 2, 12 * nodes * nodes if dense else 0))
    batch = None
    if batch_size is not None:
        b = min(batch_size, max(1, pairs))
        batch = int(_SIM_COPIES * 4 * b * nodes * nodes + 2 * b * nodes * 512)
    return MemoryEstimate(nodes, degree, pairs, dataset, generation, batch)


def check_fits(canonical: dict[str, Any], batch_size: int | None = None, what: str = "this run") -> None:
    """Refuse a plan whose estimate exceeds the machine's memory, in one line naming both."""
    est = estimate(canonical, batch_size)
    total = machine_memory()
    if est is None or total is None or est.peak <= total:
        return
    big = "training batch" if (est.batch_bytes or 0) > est.generation_bytes else "dataset"
    hint = (
        "lower --batch-size or the graph order"
        if big == "training batch"
        else "lower --train/--val or the graph order (n)"
    )
    raise GaptuiError(
        f"{what} needs about {human(est.peak)} of memory ({est.describe()}; graphs of about {est.nodes:,.0f} "
        f"nodes x {est.pairs:,} pairs) but this machine has {human(total)}; {hint}"
    )
