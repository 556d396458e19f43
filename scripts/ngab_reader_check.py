"""Check that the authors' reader (``ngab.GADataset``) and gaptui read a safetensors pair folder alike.

Outside CI (``ngab`` wants Python >= 3.12 and compiled extensions), in a virtual environment of its own::

    python3.12 -m venv /tmp/ngab && /tmp/ngab/bin/pip install torch==2.13.0 torch_geometric scipy rdkit wandb \
        safetensors jaxtyping && /tmp/ngab/bin/pip install --no-deps --ignore-requires-python ngab
    gaptui datasets export ID --format safetensors --out /tmp/pairs
    PYTHONPATH=. /tmp/ngab/bin/python scripts/ngab_reader_check.py /tmp/pairs

It prints one line per split (pairs read by each, pairs whose G and G~ agree) and exits 1 on any difference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def edge_set(edge_index: np.ndarray) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in np.asarray(edge_index).T.tolist()}


def main(folder: Path) -> int:
    from ngab import GADataset

    from engine.sources.pairs import read_split

    failed = False
    for split in ("train", "val"):
        theirs = GADataset(str(folder), validation=split == "val")
        ours, _ = read_split(folder, split)
        agree = 0
        for p in range(len(theirs)):
            item = theirs[p]
            g, h = ours.base[p], ours.corrupted[p]
            same = (
                item.base_graph.num_nodes == g.num_nodes == item.corrupted_graph.num_nodes == h.num_nodes
                and edge_set(item.base_graph.edge_index.numpy()) == edge_set(g.edges.T)
                and edge_set(item.corrupted_graph.edge_index.numpy()) == edge_set(h.edges.T)
            )
            agree += same
        ok = len(theirs) == len(ours.base) == agree
        failed |= not ok
        print(f"{split}: ngab read {len(theirs)} pairs, gaptui {len(ours.base)}; {agree} agree", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
