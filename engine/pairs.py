"""One split of an alignment dataset as a handful of flat arrays (the on-disk and the export format)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Array names of one split, in file order; ``<name>.npy`` on disk and ``<split>_<name>`` in an export.
ARRAYS = ("num_nodes", "edge_index_g", "edge_ptr_g", "edge_index_h", "edge_ptr_h", "perm")


@dataclass(frozen=True, eq=False)
class PairSplit:
    """``P`` alignment pairs ``(G, H)`` with their planted correspondence.

    - ``num_nodes``: int64 ``[P]``; both graphs of pair ``p`` have ``num_nodes[p]`` nodes.
    - ``edge_index_g``: int64 ``[2, E_g]``, local node ids, both directions of each edge, sorted by (source,
      target) within each pair; pair ``p`` owns columns ``edge_ptr_g[p]:edge_ptr_g[p + 1]``.
    - ``edge_index_h`` / ``edge_ptr_h``: the same for ``H``, the noised and permuted copy of ``G``.
    - ``perm``: int64 ``[sum(num_nodes)]``, concatenated per pair: node ``i`` of ``G`` corresponds to node
      ``perm[node_ptr[p] + i]`` of ``H``.
    """

    num_nodes: np.ndarray
    edge_index_g: np.ndarray
    edge_ptr_g: np.ndarray
    edge_index_h: np.ndarray
    edge_ptr_h: np.ndarray
    perm: np.ndarray

    def __len__(self) -> int:
        return int(self.num_nodes.shape[0])

    @property
    def node_ptr(self) -> np.ndarray:
        """``[P + 1]`` offsets of each pair's nodes in ``perm``."""
        return np.concatenate([[0], np.cumsum(self.num_nodes)]).astype(np.int64)

    def pair(self, p: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """``(num_nodes, edge_index_g, edge_index_h, perm)`` of pair ``p``, local ids."""
        ptr = self.node_ptr
        return (
            int(self.num_nodes[p]),
            self.edge_index_g[:, self.edge_ptr_g[p] : self.edge_ptr_g[p + 1]],
            self.edge_index_h[:, self.edge_ptr_h[p] : self.edge_ptr_h[p + 1]],
            self.perm[ptr[p] : ptr[p + 1]],
        )

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in ARRAYS}

    def save(self, folder: Path) -> None:
        """One ``.npy`` per array; node ids in the narrowest unsigned type that holds them (4-8x smaller)."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, arr in self.arrays().items():
            arr = np.ascontiguousarray(arr)
            if name in _NODE_ID_ARRAYS:
                arr = arr.astype(_narrowest(int(arr.max()) if arr.size else 0))
            np.save(folder / f"{name}.npy", arr.astype(arr.dtype, copy=False), allow_pickle=False)

    @classmethod
    def load(cls, folder: Path) -> PairSplit:
        """Read a split written by :meth:`save`; every array comes back as int64."""
        return cls(**{name: np.load(folder / f"{name}.npy", allow_pickle=False).astype(np.int64) for name in ARRAYS})


_NODE_ID_ARRAYS = ("edge_index_g", "edge_index_h", "perm")


def _narrowest(largest: int) -> type[np.unsignedinteger] | type[np.signedinteger]:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if largest <= np.iinfo(dtype).max:
            return dtype
    return np.int64
