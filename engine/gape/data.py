"""Molecule datasets for downstream regression, cached on disk like alignment datasets.

Layout of one cached molecule dataset (``<datasets dir>/molecules/<id>/``)::

    meta.json          spec, counts per split, skipped rows, notes, number of atom types, build time
    arrays.npz         num_nodes [G], edge_index [2, E] (local ids, both directions), edge_ptr [G + 1],
                       atom_types [N], target [G], rows [G], skipped [S], split_<name> [G_split]

Builds write into a temporary sibling folder and rename it into place, so the cache never holds a half-written
dataset; concurrent builders keep one copy.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.datasets import content_digest, seeded_rng
from engine.errors import GaptuiError
from engine.graphs import Graph
from engine.sources import SOURCES, MoleculeSource, data_root, params_dict, parse_params

#: Bump when the way molecules are read changes: old cache entries are then never confused with new ones.
FORMAT_VERSION = 1


def molecule_source(base: str) -> type[MoleculeSource]:
    """The molecule source named ``base``; other sources are refused naming the molecule sources."""
    cls = SOURCES.get(base)
    if not (isinstance(cls, type) and issubclass(cls, MoleculeSource)):
        known = ", ".join(n for n in SOURCES.names() if issubclass(SOURCES.get(n), MoleculeSource))
        raise GaptuiError(f"dataset '{base}' has no atom types or targets; molecule datasets: {known}")
    return cls


@dataclass(frozen=True)
class MoleculeSpec:
    """Everything that determines a molecule dataset: source, its parameters and the seed of drawn splits."""

    base: str
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def canonical(self) -> dict[str, Any]:
        cls = molecule_source(self.base)
        return {
            "format": FORMAT_VERSION,
            "base": cls.name,
            "params": params_dict(parse_params(cls, self.params)),
            "seed": int(self.seed),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "dataset") -> MoleculeSpec:
        extra = set(raw) - {"base", "params", "seed"}
        if "base" not in raw or extra:
            unknown = f"; unknown: {', '.join(sorted(extra))}" if extra else ""
            raise GaptuiError(f"{where}: needs key base (optional: params, seed){unknown}")
        params, seed = raw.get("params") or {}, raw.get("seed", 0)
        if not isinstance(params, dict):
            raise GaptuiError(f"{where}: params = {params!r}: expected a table of source parameters")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise GaptuiError(f"{where}: seed = {seed!r}: expected a seed >= 0")
        return cls(str(raw["base"]), dict(params), seed)


def molecule_id(canonical: dict[str, Any]) -> str:
    return f"mol-{canonical['base']}-{content_digest(canonical)[:12]}"


@dataclass(frozen=True)
class MoleculeData:
    """A cached molecule dataset, as flat arrays (see the module docstring)."""

    id: str
    path: Path
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]

    @property
    def num_nodes(self) -> np.ndarray:
        return self.arrays["num_nodes"]

    @property
    def node_ptr(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.num_nodes)]).astype(np.int64)

    @property
    def num_atom_types(self) -> int:
        return int(self.meta["num_atom_types"])

    def split(self, name: str) -> np.ndarray:
        """Indices of the molecules of split ``name``; empty when the dataset has no such split."""
        return self.arrays.get(f"split_{name}", np.empty(0, dtype=np.int64))

    def has_split(self, name: str) -> bool:
        return f"split_{name}" in self.arrays and self.arrays[f"split_{name}"].size > 0

    def graphs(self) -> list[Graph]:
        """The molecules as graphs (structure only)."""
        n, ptr, ei = self.num_nodes, self.arrays["edge_ptr"], self.arrays["edge_index"]
        out = []
        for i in range(n.size):
            e = ei[:, ptr[i] : ptr[i + 1]]
            keep = e[0] < e[1]
            out.append(Graph(int(n[i]), np.ascontiguousarray(e[:, keep].T)))
        return out


def _write_json(path: Path, obj: Any) -> None:
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())


def atomic_build(final: Path, write: Callable[[Path], None]) -> bool:
    """Build into a temporary sibling of ``final`` with ``write(tmp)`` and rename it into place.

    Returns False when another builder got there first (its copy is kept: builds are deterministic).
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        tmp.mkdir()
        write(tmp)
        if (final / "meta.json").exists():
            return False
        if final.exists():
            shutil.rmtree(final)  # a folder without meta.json is a leftover of an older, killed build
        os.replace(tmp, final)
        return True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def build_molecules(spec: MoleculeSpec, datasets_dir: Path, raw_root: Path | None = None) -> tuple[MoleculeData, bool]:
    """Build (or find in the cache) the molecule dataset of ``spec``. Returns ``(data, built_now)``."""
    canonical = spec.canonical()
    ident = molecule_id(canonical)
    final = Path(datasets_dir) / "molecules" / ident
    if (final / "meta.json").exists():
        return open_molecules(final), False
    started = time.perf_counter()
    cls = molecule_source(canonical["base"])
    source = cls(parse_params(cls, canonical["params"]))
    mols = source.molecules(seeded_rng(canonical["seed"], canonical), data_root(raw_root))
    graphs = mols.graphs
    num_nodes = np.array([g.num_nodes for g in graphs], dtype=np.int64)
    edge_index = [g.edge_index() for g in graphs]
    edge_ptr = np.concatenate([[0], np.cumsum([e.shape[1] for e in edge_index])]).astype(np.int64)
    types = [np.asarray(g.node_types, dtype=np.int64) for g in graphs]
    arrays: dict[str, np.ndarray] = {
        "num_nodes": num_nodes,
        "edge_index": np.concatenate(edge_index, axis=1) if edge_index else np.zeros((2, 0), np.int64),
        "edge_ptr": edge_ptr,
        "atom_types": np.concatenate(types) if types else np.zeros(0, np.int64),
        "target": np.array([g.target if g.target is not None else np.nan for g in graphs], dtype=np.float64),
        "rows": np.asarray(mols.rows, dtype=np.int64),
        "skipped": np.asarray(mols.skipped, dtype=np.int64),
    }
    for name, idx in mols.splits.items():
        arrays[f"split_{name}"] = np.asarray(idx, dtype=np.int64)
    if arrays["atom_types"].size and arrays["atom_types"].min() < 0:
        raise GaptuiError(f"{canonical['base']}: negative atom types")
    meta = {
        "id": ident,
        "spec": canonical,
        "molecules": int(num_nodes.size),
        "splits": {name: int(idx.size) for name, idx in mols.splits.items()},
        "official_splits": mols.official,
        "target": mols.target_name,
        "num_atom_types": int(arrays["atom_types"].max()) + 1 if arrays["atom_types"].size else 1,
        "skipped": len(mols.skipped),
        "notes": list(mols.notes),
        "mean_atoms": float(num_nodes.mean()) if num_nodes.size else 0.0,
        "max_atoms": int(num_nodes.max()) if num_nodes.size else 0,
        "build_seconds": round(time.perf_counter() - started, 3),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }

    def write(tmp: Path) -> None:
        np.savez(tmp / "arrays.npz", **arrays)
        _write_json(tmp / "meta.json", meta)

    built = atomic_build(final, write)
    return open_molecules(final), built


def open_molecules(path: Path) -> MoleculeData:
    path = Path(path)
    try:
        meta = json.loads((path / "meta.json").read_text())
        with np.load(path / "arrays.npz") as z:
            arrays = {k: z[k] for k in z.files}
    except (FileNotFoundError, json.JSONDecodeError, OSError, ValueError) as exc:
        raise GaptuiError(f"molecule dataset {path} is unreadable ({exc}); delete the folder to rebuild it") from None
    return MoleculeData(meta["id"], path, meta, arrays)
