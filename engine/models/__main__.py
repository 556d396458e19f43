"""``python -m engine.models [budget]``: width, head count, parameter count and build time of each model."""

from __future__ import annotations

import sys
import time

from engine.models import DEFAULT_BUDGET, build, describe, names


def table(budget: int = DEFAULT_BUDGET, out_dims: tuple[int, ...] = (64, 32)) -> str:
    """One row per built-in model; the first build of each pays for the (then cached) budget search."""
    header = f"{'model':<9}" + "".join(f"{'out_dim ' + str(d) + ': width params ms':>36}" for d in out_dims)
    rows = [f"budget {budget:,}", header]
    for name in names():
        cells = []
        for out_dim in out_dims:
            start = time.perf_counter()
            model = build(name, out_dim=out_dim, budget=budget)
            ms = (time.perf_counter() - start) * 1e3
            heads = f" ({model.heads} heads)" if hasattr(model, "heads") else ""
            cells.append(f"{model.width}{heads} {model.num_parameters:,} {ms:.0f}")
        rows.append(f"{name:<9}" + "".join(f"{c:>36}" for c in cells) + f"   {describe(name)}")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_BUDGET))
