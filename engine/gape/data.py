"""Molecule datasets for downstream regression, cached on disk like alignment datasets.

Layout of one cached molecule dataset (``<datasets dir>/molecules/<id>/``)::

    meta.json          spec, counts per split, skipped rows, notes, number of atom types, build time
    arrays.npz         num_nodes [G], edge_index [2, E] (local ids, both directions), edge_ptr [G + 1],
                       atom_types [N], target [G], rows [G], skipped [S], split_<name> [G_split]

Each dataset is an entry of the fingerprinted store (:mod:`engine.cache`): written into a temporary sibling
folder and renamed into place (concurrent builders keep one copy), checked against the sizes and checksums in
``meta.json`` when opened, and moved aside and built again when it fails.
"""

from __future__ import annotations

import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.cache import Entry, content_digest, open_entry, read_meta, seeded_rng, write_entry
from engine.errors import GaptuiError
from engine.graphs import Graph, graph_bytes
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
        if int(self.seed) < 0:
            raise GaptuiError(f"molecule dataset seed {self.seed}: expected a seed >= 0")
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
class MoleculeData(Entry):
    """A cached molecule dataset, as flat arrays (see the module docstring)."""

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


def molecules_bytes(count: int, atoms: float, degree: float) -> int:
    """Peak bytes of ``count`` graphs of ``atoms`` nodes and mean degree ``degree`` held as :class:`Graph` objects
    and as the flat arrays :func:`build_molecules` makes of them (both directions of each edge, int64, and the
    concatenated copy)."""
    return int(count * (graph_bytes(atoms, degree) + 2 * atoms * (16 * degree + 8) + 64))


def check_source_fits(
    base: str, params: dict[str, Any], what: str, count: int | None = None, per_node: int = 0
) -> None:
    """Refuse, before any graph is drawn or read, a source whose graphs cannot fit in this machine's memory, with
    ``per_node`` more bytes per node (an encoding or embedding of them). ``count`` defaults to the source's own
    (a user-given count such as ringmol's ``count``); nothing is refused where neither the count nor the graph
    size is known before loading (files: their size is what it is)."""
    from engine.memory import refuse_over_memory

    cls = SOURCES.get(base)
    parsed = parse_params(cls, params)
    count = cls.count_hint(parsed) if count is None else count
    hint = cls.size_hint(parsed)
    if count is None or hint is None:
        return
    nodes, degree, _ = hint
    need = molecules_bytes(count, nodes, degree) + count * nodes * per_node
    refuse_over_memory(
        what,
        need,
        f"{count:,} graphs of about {nodes:,.0f} nodes",
        f"lower the number or size of the graphs of {cls.name}",
    )


def build_molecules(spec: MoleculeSpec, datasets_dir: Path, raw_root: Path | None = None) -> tuple[MoleculeData, bool]:
    """Build (or find in the cache) the molecule dataset of ``spec``. Returns ``(data, built_now)``."""
    canonical = spec.canonical()
    ident = molecule_id(canonical)
    final = Path(datasets_dir) / "molecules" / ident
    cached = open_molecules(final)
    if cached is not None:
        return cached, False
    started = time.perf_counter()
    cls = molecule_source(canonical["base"])
    check_source_fits(cls.name, canonical["params"], f"molecule dataset {ident}")
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

    def write(tmp: Path) -> dict[str, Any]:
        np.savez(tmp / "arrays.npz", **arrays)
        return meta

    built = write_entry(final, write)
    return _load(final, read_meta(final, REQUIRED)), built


REQUIRED = ("id", "num_atom_types")


def open_molecules(path: Path) -> MoleculeData | None:
    """The cached molecule dataset at ``path`` after its check; None when there is none or (after moving it aside
    with a one-line warning) when it failed the check."""
    meta = open_entry(path, "cached molecule dataset", required=REQUIRED, files=("arrays.npz",), legacy=_loads)
    return None if meta is None else _load(Path(path), meta)


#: What reading a damaged ``arrays.npz`` raises.
UNREADABLE = (OSError, ValueError, EOFError, zipfile.BadZipFile)


def _arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path / "arrays.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _load(path: Path, meta: dict[str, Any]) -> MoleculeData:
    try:
        arrays = _arrays(path)
    except UNREADABLE as exc:
        raise GaptuiError(f"molecule dataset {path}: cannot read arrays.npz ({exc}); build it again") from None
    return MoleculeData(meta["id"], path, meta, arrays)


def _loads(path: Path, meta: dict[str, Any]) -> str:
    """A dataset cached before fingerprints were recorded: every array reads back whole (the archive's CRC-32s
    catch altered bytes) and there is one node count per molecule."""
    try:
        arrays = _arrays(path)
    except UNREADABLE as exc:
        return f"arrays.npz: unreadable ({exc})"
    count = arrays["num_nodes"].size if "num_nodes" in arrays else None
    return "" if count == meta.get("molecules") else f"arrays.npz: {count} molecules, expected {meta.get('molecules')}"
