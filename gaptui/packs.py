"""Packed seeds: which runs may share one worker process (``pack_seeds``), used by the scheduler and the estimate."""

from __future__ import annotations

from collections.abc import Sequence


def group_packs(cells: Sequence[str], size: int) -> list[list[int]]:
    """Indices of runs (in start order, ``cells[i]`` the :meth:`~engine.tasks.TaskSpec.seedless` key of run ``i``)
    grouped as ``pack_seeds = size`` groups them: up to ``size`` runs of one cell per worker process, each pack at
    the place of its first run."""
    out: list[list[int]] = []
    open_packs: dict[str, list[int]] = {}
    for i, cell in enumerate(cells):
        pack = open_packs.get(cell)
        if pack is not None and len(pack) < size:
            pack.append(i)
        else:
            open_packs[cell] = [i]
            out.append(open_packs[cell])
    return out
