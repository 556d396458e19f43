"""Positional encodings of molecules for the downstream transformer, computed once per (dataset, PE) and cached.

=====================  ===================================================================================
name                   encoding of each atom
=====================  ===================================================================================
``none``               nothing (the transformer sees a bag of atom types)
``lap``                the ``k`` Laplacian eigenvectors of smallest non-trivial eigenvalue (PyG
                       ``AddLaplacianEigenvectorPE``, symmetric normalised Laplacian), one random sign per
                       eigenvector drawn once when the encoding is computed
``abs-lap``            their absolute values (sign-invariant, loses information)
``r-lap``              ``lap`` with the sign of each eigenvector flipped at random per molecule and per epoch
                       during training (sign-flip augmentation); evaluation uses the stored signs
``rwpe``               random-walk return probabilities for 1..``steps`` steps (PyG ``AddRandomWalkPE``)
``gape:<run>``         the node embeddings of the finished alignment run ``<run>`` (:mod:`engine.gape.embed`)
``gape:<run>+rwpe``    both, concatenated
=====================  ===================================================================================

Graphs with ``n <= k`` atoms have ``n - 1`` non-trivial eigenvectors; the missing columns are zeros.
Cached parts live in ``<datasets dir>/pe/<molecule dataset id>/<part>-<hash>/`` (``meta.json`` and ``pe.npy``,
float32 ``[sum(num_nodes), dim]``), entries of the fingerprinted store (:mod:`engine.cache`: written atomically,
checked when read, moved aside and computed again when they fail); ``abs-lap``, ``r-lap`` and ``gape+rwpe`` are
derived from the cached ``lap``, ``rwpe`` and ``gape`` parts when loaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.cache import content_digest, open_entry, write_entry
from engine.errors import GaptuiError
from engine.gape.data import MoleculeData

#: Bump when an encoding's computation changes.
PE_FORMAT = 1
KINDS = ("none", "lap", "abs-lap", "r-lap", "rwpe", "gape", "gape+rwpe")


@dataclass(frozen=True)
class PESpec:
    """A parsed PE name: ``kind`` (one of :data:`KINDS`) and, for GAPE kinds, the pretraining ``run``."""

    kind: str
    run: str | None = None

    @property
    def name(self) -> str:
        if self.run is None:
            return self.kind
        return f"gape:{self.run}" + ("+rwpe" if self.kind == "gape+rwpe" else "")

    @property
    def label(self) -> str:
        """The row label of result tables (the run left out: one GAPE row per downstream dataset)."""
        return {"gape+rwpe": "gape+rwpe"}.get(self.kind, self.kind)


def parse_pe(text: str) -> PESpec:
    """``none``, ``lap``, ``abs-lap``, ``r-lap``, ``rwpe``, ``gape:<run>`` or ``gape:<run>+rwpe``."""
    raw = str(text).strip()
    low = raw.lower()
    if low in KINDS and not low.startswith("gape"):
        return PESpec(low)
    if low.startswith("gape:"):
        run = raw[5:]
        kind = "gape"
        if run.lower().endswith("+rwpe"):
            run, kind = run[: -len("+rwpe")], "gape+rwpe"
        if run:
            return PESpec(kind, run)
    expected = "none, lap, abs-lap, r-lap, rwpe, gape:<run> or gape:<run>+rwpe"
    raise GaptuiError(f"positional encoding '{raw}': expected one of {expected}")


# --------------------------------------------------------------------------------------------- computations


def _graph_data(data: MoleculeData, i: int) -> Any:
    import torch
    from torch_geometric.data import Data

    ptr = data.arrays["edge_ptr"]
    ei = torch.as_tensor(data.arrays["edge_index"][:, ptr[i] : ptr[i + 1]])
    return Data(edge_index=ei, num_nodes=int(data.num_nodes[i]))


def laplacian_pe(data: MoleculeData, k: int, seed: int) -> np.ndarray:
    """PyG's Laplacian eigenvector PE of every molecule, float32 ``[sum(num_nodes), k]``.

    Its random signs come from torch's global generator, so they are drawn under a fork seeded by ``seed``.
    """
    import torch
    from torch_geometric.transforms import AddLaplacianEigenvectorPE

    out = np.zeros((int(data.num_nodes.sum()), k), dtype=np.float32)
    ptr = data.node_ptr
    transforms: dict[int, Callable[[Any], Any]] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for i, n in enumerate(data.num_nodes.tolist()):
            width = min(k, n - 1)  # a graph of n nodes has n - 1 non-trivial eigenvectors
            if width < 1:
                continue
            if width not in transforms:
                transforms[width] = AddLaplacianEigenvectorPE(width, attr_name="pe", is_undirected=True)
            pe = transforms[width](_graph_data(data, i)).pe
            out[ptr[i] : ptr[i + 1], :width] = pe.numpy()
    return out


def random_walk_pe(data: MoleculeData, steps: int) -> np.ndarray:
    """PyG's random-walk PE (return probabilities after 1..steps steps), float32 ``[sum(num_nodes), steps]``."""
    from torch_geometric.transforms import AddRandomWalkPE

    transform = AddRandomWalkPE(steps, attr_name="pe")
    out = np.zeros((int(data.num_nodes.sum()), steps), dtype=np.float32)
    ptr = data.node_ptr
    for i in range(data.num_nodes.size):
        out[ptr[i] : ptr[i + 1]] = transform(_graph_data(data, i)).pe.numpy()
    return out


def gape_pe(data: MoleculeData, run_dir: Path, device: str = "cpu") -> np.ndarray:
    """The node embeddings of the finished alignment run in ``run_dir``, float32 ``[sum(num_nodes), d]``."""
    from engine.gape.embed import load_frozen

    frozen = load_frozen(run_dir, device)
    return frozen.embed(data.num_nodes, data.arrays["edge_index"], data.arrays["edge_ptr"])


# --------------------------------------------------------------------------------------------- cache


@dataclass(frozen=True)
class EncodingOptions:
    """What an encoding depends on besides its kind: eigenvector count, walk length, where runs live."""

    lap_k: int = 8
    rwpe_steps: int = 20
    runs_dir: Path | None = None
    device: str = "cpu"


def _cached_part(
    data: MoleculeData, datasets_dir: Path, key: dict[str, Any], compute: Callable[[], np.ndarray]
) -> np.ndarray:
    """The array of one encoding part, computed once per (molecule dataset, part) and cached atomically."""
    canonical = {"format": PE_FORMAT, "molecules": data.id, **key}
    final = Path(datasets_dir) / "pe" / data.id / f"{key['part']}-{content_digest(canonical)[:12]}"
    rows = int(data.num_nodes.sum())
    if open_entry(final, "cached positional encoding", required=("spec", "shape"), files=("pe.npy",)) is not None:
        try:
            values = np.load(final / "pe.npy", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise GaptuiError(f"positional encoding {final}: cannot read pe.npy ({exc}); compute it again") from None
        if values.ndim == 2 and values.shape[0] == rows:
            return values
        raise GaptuiError(f"positional encoding {final}: pe.npy has shape {values.shape}, expected {rows} rows")
    started = time.perf_counter()
    values = np.ascontiguousarray(compute(), dtype=np.float32)

    def write(tmp: Path) -> dict[str, Any]:
        np.save(tmp / "pe.npy", values, allow_pickle=False)
        return {"spec": canonical, "shape": list(values.shape), "seconds": round(time.perf_counter() - started, 3)}

    write_entry(final, write)
    return values


@dataclass
class Encoding:
    """The positional encoding of every atom of a molecule dataset: ``values`` float32 ``[sum(num_nodes), dim]``;
    for ``r-lap``, the first ``flip`` columns are eigenvectors whose signs training flips at random."""

    values: np.ndarray
    flip: int = 0

    @property
    def dim(self) -> int:
        return int(self.values.shape[1])


def check_encoding_fits(data: MoleculeData, pe: PESpec, options: EncodingOptions) -> None:
    """Refuse an encoding of ``data`` that cannot fit in this machine's memory: float32 ``[atoms, width]``, computed,
    saved and read back (a GAPE part counted at 64 wide, the default embedding)."""
    from engine.memory import refuse_over_memory

    width = {"lap": options.lap_k, "abs-lap": options.lap_k, "r-lap": options.lap_k, "rwpe": options.rwpe_steps}
    dim = width.get(pe.kind, 64 + (options.rwpe_steps if pe.kind == "gape+rwpe" else 0))
    atoms = int(data.num_nodes.sum())
    refuse_over_memory(
        f"positional encoding {pe.name} of {data.id}",
        3 * 4 * atoms * dim,
        f"{atoms:,} atoms x {dim} values",
        "use a smaller molecule dataset or encoding",
    )


def encoding(data: MoleculeData, pe: PESpec, datasets_dir: Path, options: EncodingOptions) -> Encoding:
    """The encoding ``pe`` of ``data``, from the cache or computed now (and cached)."""
    total = int(data.num_nodes.sum())
    if pe.kind == "none":
        return Encoding(np.zeros((total, 0), dtype=np.float32))
    check_encoding_fits(data, pe, options)
    parts: list[np.ndarray] = []
    if pe.kind in ("lap", "abs-lap", "r-lap"):
        seed = int(content_digest({"lap": data.id})[:8], 16)
        lap = _cached_part(
            data, datasets_dir, {"part": "lap", "k": options.lap_k}, lambda: laplacian_pe(data, options.lap_k, seed)
        )
        if pe.kind == "abs-lap":
            return Encoding(np.abs(lap))
        return Encoding(lap, flip=options.lap_k if pe.kind == "r-lap" else 0)
    if pe.kind in ("gape", "gape+rwpe"):
        from engine.gape.embed import load_frozen, resolve_run

        run_dir = resolve_run(str(pe.run), options.runs_dir)
        run_hash = load_frozen(run_dir).run  # the cache key is what the model is, not where it lies
        parts.append(
            _cached_part(
                data, datasets_dir, {"part": "gape", "run": run_hash}, lambda: gape_pe(data, run_dir, options.device)
            )
        )
    if pe.kind in ("rwpe", "gape+rwpe"):
        steps = options.rwpe_steps
        parts.append(
            _cached_part(data, datasets_dir, {"part": "rwpe", "steps": steps}, lambda: random_walk_pe(data, steps))
        )
    if not parts:
        raise GaptuiError(f"positional encoding '{pe.name}' is not computable")
    return Encoding(np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0])
