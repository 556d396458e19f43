"""Packed seeds: which runs may share one worker process (``pack_seeds``), used by the scheduler and the estimate."""

from __future__ import annotations

import json
from collections.abc import Sequence

from engine.tasks import TaskSpec


def pack_key(spec: TaskSpec) -> str:
    """A spec without its seed: runs with equal keys differ only by seed, so a pack (``pack_seeds``) may hold them."""
    return json.dumps({k: v for k, v in spec.to_dict().items() if k != "seed"}, sort_keys=True)


def group_packs(cells: Sequence[str], size: int) -> list[list[int]]:
    """Indices of runs (in start order, ``cells[i]`` the :func:`pack_key` of run ``i``) grouped as
    ``pack_seeds = size`` groups them: up to ``size`` runs of one cell per worker process, each pack at the place
    of its first run."""
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
