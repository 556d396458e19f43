"""Choose a built-in model's width so that its trainable parameter count meets a budget.

Architectures are compared at (nearly) equal parameter counts, so the width is not a free choice: for each
candidate option set (see :meth:`ResidualGNN.budget_variants`) we look for the width, among the allowed
multiples, whose count is closest to the budget, and accept the first option set whose closest count is
within :data:`TOLERANCE`. Counts are probed by building the model on the ``meta`` device; a quadratic fit
of three probes predicts the width and a few more probes confirm it, so a search takes ~5 builds. Results
are cached per (model, dims, budget, options).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import torch

from engine.errors import GaptuiError
from engine.models.base import ResidualGNN, count_parameters

#: Allowed relative distance between a model's trainable parameter count and the budget.
TOLERANCE = 0.05
#: Ceiling on widths tried, so an absurd budget ends in a clear error rather than a huge model.
MAX_WIDTH = 1 << 14


def parameter_count(cls: type[ResidualGNN], width: int, out_dim: int, in_dim: int, options: Mapping[str, Any]) -> int:
    """Trainable parameters of ``cls`` at ``width``, without allocating weights or touching the global RNG.

    The model is built on the ``meta`` device (shapes only), so probing wide candidates costs no memory; a
    layer that cannot be built there falls back to a CPU build. Initialisers may still draw from the CPU
    generator even on ``meta`` (PyG's ``inits.uniform`` does), hence the forked RNG: a seeded run's own
    initialisation is identical whether or not this search ran (or was served from the cache) first.
    """
    kwargs = {k: v for k, v in options.items() if k != "width"}
    with torch.random.fork_rng(devices=[]):
        try:
            with torch.device("meta"):
                return count_parameters(cls(width=width, out_dim=out_dim, in_dim=in_dim, **kwargs))
        except (RuntimeError, NotImplementedError):
            return count_parameters(cls(width=width, out_dim=out_dim, in_dim=in_dim, **kwargs))


def closest_width(
    cls: type[ResidualGNN], out_dim: int, in_dim: int, budget: int, options: Mapping[str, Any]
) -> tuple[int, int]:
    """``(width, count)`` with the count closest to ``budget`` among widths that are allowed multiples.

    Ties go to the smaller width (fewer parameters, cheaper to train). Widths are ``k * step``; we work on
    ``k``. The count only has to be non-decreasing in the width for the answer to be right; being quadratic
    (as for every built-in) only makes it fast: three probes give the guess that the bracket starts from.
    """
    step = cls.width_multiple(options)
    max_k = max(1, MAX_WIDTH // step)
    counts: dict[int, int] = {}

    def count(k: int) -> int:
        if k not in counts:
            counts[k] = parameter_count(cls, k * step, out_dim, in_dim, options)
        return counts[k]

    if count(1) >= budget:
        return step, count(1)
    # Fit count(k) = a k^2 + b k + c through k = 1, 2, 3 and solve for the budget.
    c1, c2, c3 = count(1), count(2), count(3)
    a = (c3 - 2 * c2 + c1) / 2
    b = (c2 - c1) - 3 * a
    c = c1 - a - b
    if a > 0:
        guess = (-b + math.sqrt(max(b * b - 4 * a * (c - budget), 0.0))) / (2 * a)
    else:
        guess = (budget - c) / b if b > 0 else max_k
    low = min(max(1, math.floor(guess)), max_k)
    # Bracket count(low) < budget <= count(high), galloping outwards from the guess if it was off.
    gap = 1
    while low > 1 and count(low) >= budget:
        low, gap = max(1, low - gap), gap * 2
    if count(low) >= budget:  # only k = 1 reaches the budget
        return step, count(low)
    high, gap = min(low + 1, max_k), 1
    while count(high) < budget and high < max_k:
        low, high, gap = high, min(high + gap, max_k), gap * 2
    if count(high) < budget:  # even the widest allowed model is below budget
        return high * step, count(high)
    while high - low > 1:
        mid = (low + high) // 2
        if count(mid) < budget:
            low = mid
        else:
            high = mid
    if budget - count(low) <= count(high) - budget:
        return low * step, count(low)
    return high * step, count(high)


def _freeze(value: Any) -> Any:
    """A hashable stand-in for an option value (lists and tensors become tuples)."""
    if isinstance(value, torch.Tensor):
        return tuple(value.detach().cpu().flatten().tolist())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def choose(
    cls: type[ResidualGNN],
    *,
    out_dim: int,
    in_dim: int,
    budget: int,
    options: Mapping[str, Any],
    explicit: set[str],
) -> dict[str, Any]:
    """Options (with ``width``) for ``cls`` whose trainable count is within :data:`TOLERANCE` of ``budget``.

    ``options`` are validated and complete; ``explicit`` names the keys the user gave, which the search must
    not change. Raises :class:`GaptuiError` when no allowed width comes close enough.
    """
    frozen = tuple(sorted((k, _freeze(v)) for k, v in options.items()))
    width, variant = _choose_cached(cls, out_dim, in_dim, budget, frozen, frozenset(explicit))
    return {**options, **dict(variant), "width": width}


@functools.lru_cache(maxsize=512)
def _choose_cached(
    cls: type[ResidualGNN],
    out_dim: int,
    in_dim: int,
    budget: int,
    frozen: tuple[tuple[str, Any], ...],
    explicit: frozenset[str],
) -> tuple[int, tuple[tuple[str, Any], ...]]:
    # Frozen values (tuples for lists and tensors) are accepted by every option checker and constructor.
    options = dict(frozen)
    misses: list[str] = []
    for variant in cls.budget_variants(options, set(explicit)):
        width, count = closest_width(cls, out_dim, in_dim, budget, variant)
        if abs(count - budget) <= TOLERANCE * budget:
            changed = tuple(sorted((k, v) for k, v in variant.items() if options.get(k) != v))
            return width, changed
        # Name the scalar model options of this attempt (e.g. heads=4), not long values like a histogram.
        extra = ", ".join(f"{k}={v}" for k, v in variant.items() if k in cls.OPTIONS and isinstance(v, int))
        misses.append(f"width {width}{' ' + extra if extra else ''} has {count:,}")
    raise GaptuiError(
        f"model '{cls.name}': no width gives {budget:,} trainable parameters within {TOLERANCE:.0%} "
        f"(out_dim={out_dim}, in_dim={in_dim}; closest: {'; '.join(misses)}); "
        f"pass width= explicitly or choose another budget"
    )
