"""The frozen model of a finished alignment run, applied to any graphs: GAPE, graph alignment positional encodings.

Each graph goes through the run's model alone (the siamese twin is not needed): its node embeddings
``X [num_nodes, d]`` are the encoding. Built-in models normalise per graph, so a graph's encoding never depends
on the other graphs of a batch, and they are permutation-equivariant: relabelling a graph permutes its rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from engine.errors import GaptuiError, did_you_mean
from engine.files import read_json, staged_files
from engine.graphs import Graph

#: Nodes embedded per forward pass (bounds memory; a batch never splits a graph).
BATCH_NODES = 32768


def resolve_run(ref: str, runs_dir: Path | None) -> Path:
    """The folder of run ``ref``: a path to a run folder, else a run id or unique id prefix under ``runs_dir``."""
    as_path = Path(ref).expanduser()
    if (as_path / "spec.json").is_file():
        return as_path.resolve()
    if runs_dir is None or not Path(runs_dir).is_dir():
        raise GaptuiError(f"run '{ref}': not a run folder, and there is no runs folder {runs_dir} to look it up in")
    runs = sorted(p.name for p in Path(runs_dir).iterdir() if (p / "spec.json").is_file())
    # A run folder is named by the first 12 hex digits of the spec hash; a longer reference is a full hash.
    matches = [r for r in runs if r.startswith(ref) or (len(ref) > len(r) and ref.startswith(r))]
    if len(matches) == 1:
        return (Path(runs_dir) / matches[0]).resolve()
    if not matches:
        raise GaptuiError(f"no run '{ref}' in {runs_dir}{did_you_mean(ref, runs)}")
    raise GaptuiError(f"run id '{ref}' is ambiguous in {runs_dir}: {', '.join(matches[:5])}")


@dataclass
class FrozenEmbedder:
    """A trained alignment model in eval mode with gradients off, and what it needs to be fed."""

    run: str  # the run's full spec hash
    run_dir: Path
    model: nn.Module
    features: str
    out_dim: int
    device: torch.device

    @torch.no_grad()
    def embed(self, num_nodes: np.ndarray, edge_index: np.ndarray, edge_ptr: np.ndarray) -> np.ndarray:
        """Embeddings of a list of graphs given as flat arrays, float32 ``[sum(num_nodes), out_dim]``.

        ``num_nodes [G]``; ``edge_index [2, E]`` local node ids per graph, both directions of each edge; graph
        ``g``'s edges are columns ``edge_ptr[g]:edge_ptr[g + 1]``. Rows follow the graphs in order.

        The model's inputs are those it trained on (the run's ``features``): positional parts (``rwpe:K``,
        ``lap:K``) are computed for each graph from its own edges, eigenvector signs as stored (no flips).
        """
        from engine.alignment.features import model_inputs, positional_encoding

        num_nodes = np.asarray(num_nodes, dtype=np.int64)
        node_ptr = np.concatenate([[0], np.cumsum(num_nodes)]).astype(np.int64)
        pos = torch.as_tensor(positional_encoding(self.features, num_nodes, edge_index, edge_ptr), device=self.device)
        out = np.zeros((int(node_ptr[-1]), self.out_dim), dtype=np.float32)
        g = 0
        while g < num_nodes.size:
            # Whole graphs until the node budget is reached (at least one graph per pass).
            stop = max(int(np.searchsorted(node_ptr, node_ptr[g] + BATCH_NODES, side="right")) - 1, g + 1)
            stop = min(stop, num_nodes.size)
            lo, hi = int(node_ptr[g]), int(node_ptr[stop])
            e_lo, e_hi = int(edge_ptr[g]), int(edge_ptr[stop])
            shift = np.repeat(node_ptr[g:stop] - lo, np.diff(edge_ptr[g : stop + 1]))
            ei = torch.as_tensor(edge_index[:, e_lo:e_hi] + shift, device=self.device)
            batch = torch.as_tensor(np.repeat(np.arange(stop - g), num_nodes[g:stop]), device=self.device)
            x = model_inputs(self.features, ei, hi - lo, pos[lo:hi])
            out[lo:hi] = self.model(x, ei, batch).float().cpu().numpy()
            g = stop
        return out

    def embed_graphs(self, graphs: list[Graph]) -> np.ndarray:
        """Embeddings of ``graphs``, stacked in order: float32 ``[sum(num_nodes), out_dim]``."""
        edge_index = [g.edge_index() for g in graphs]
        edge_ptr = np.concatenate([[0], np.cumsum([e.shape[1] for e in edge_index])]).astype(np.int64)
        flat = np.concatenate(edge_index, axis=1) if edge_index else np.zeros((2, 0), np.int64)
        return self.embed(np.array([g.num_nodes for g in graphs], dtype=np.int64), flat, edge_ptr)


def load_frozen(run_dir: Path, device: str | torch.device = "cpu") -> FrozenEmbedder:
    """The model of the finished alignment run in ``run_dir``, frozen.

    Rebuilt exactly as the worker built it (same name, dimensions, budget and options) and loaded from
    ``checkpoint.pt``; refuses runs that are not done, the training-free baseline and checkpoints of another spec.
    """
    from engine import models
    from engine.alignment.spec import RunSpec
    from engine.checkpoints import read_checkpoint

    run_dir = Path(run_dir)
    spec = RunSpec.from_file(run_dir / "spec.json")
    result = read_json(run_dir / "result.json")
    result = result if isinstance(result, dict) else {}
    if result.get("status") != "done":
        raise GaptuiError(f"run {run_dir.name} has not finished (status: {result.get('status', 'no result yet')})")
    if not spec.trains:
        what = (
            "the training-free Laplacian baseline"
            if spec.model == "laplacian"
            else f"{spec.model}, which trains no model"
        )
        raise GaptuiError(f"run {run_dir.name} is {what}: there is no model to embed with")
    ckpt_path = run_dir / "checkpoint.pt"
    if not ckpt_path.is_file():
        raise GaptuiError(f"run {run_dir.name} has no checkpoint.pt to take the model from")
    ckpt = read_checkpoint(ckpt_path)
    if ckpt.get("run") != spec.run_id():
        raise GaptuiError(f"{ckpt_path} belongs to another run spec than {run_dir / 'spec.json'}")
    from engine.alignment.features import feature_dim

    features = str(ckpt["features"])
    if feature_dim(features, f"{ckpt_path}") != int(ckpt["in_dim"]):
        raise GaptuiError(f"{ckpt_path}: features '{features}' give {feature_dim(features)} inputs, not its in_dim")
    with torch.random.fork_rng(devices=[]):  # building initialises weights: leave the caller's stream alone
        model = models.build(
            spec.model, out_dim=ckpt["out_dim"], budget=spec.budget, in_dim=ckpt["in_dim"], **spec.model_options()
        )
    model.load_state_dict(ckpt["model"])
    device = torch.device(device)
    model.to(device).eval().requires_grad_(False)
    return FrozenEmbedder(spec.run_id(), run_dir, model, features, int(ckpt["out_dim"]), device)


def write_embeddings(
    out: Path, num_nodes: np.ndarray, pe: np.ndarray, skipped: np.ndarray, run: str, *, force: bool = False
) -> Path:
    """Write the ``.npz`` of ``gaptui gape embed`` (format in the README); an existing file needs ``force``."""
    out = Path(out)
    if out.suffix != ".npz":
        raise GaptuiError(f"--out {out}: expected a file name ending in .npz")
    if out.exists() and not force:
        raise GaptuiError(f"--out {out} exists; choose another name or pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    with staged_files() as stage, open(stage(out), "wb") as fh:
        np.savez_compressed(
            fh,
            num_nodes=np.asarray(num_nodes, dtype=np.int64),
            pe=np.asarray(pe, dtype=np.float32),
            skipped=np.asarray(skipped, dtype=np.int64),
            run=np.array(run),
        )
    return out


@dataclass
class SourceEmbedding:
    """What ``gaptui gape embed`` writes: per-graph node counts in source order, the stacked embeddings, the
    source rows left out, and the run."""

    num_nodes: np.ndarray
    pe: np.ndarray
    skipped: np.ndarray
    run: str
    notes: list[str]


def check_embedding_fits(base: str, params: dict[str, str], seed: int, dim: int = 0) -> None:
    """Refuse, before the model or any graph is loaded, a negative seed or a source whose graphs and ``dim``-wide
    float32 embeddings (each pass's output and the stacked result) cannot fit in this machine's memory."""
    from engine.gape.data import check_source_fits
    from engine.sources import SOURCES, MoleculeSource

    if int(seed) < 0:
        raise GaptuiError(f"--seed {seed}: expected a seed >= 0")
    cls = SOURCES.get(base)
    count = None
    if not (isinstance(cls, type) and issubclass(cls, MoleculeSource)) and None not in cls.sizes:
        count = int(cls.sizes[0]) + int(cls.sizes[1])  # what embed_source draws: the default train and val sizes
    check_source_fits(base, params, f"embedding {base}", count=count, per_node=2 * 4 * dim)


def embed_source(
    frozen: FrozenEmbedder,
    base: str,
    params: dict[str, str],
    *,
    seed: int,
    datasets_dir: Path,
    raw_root: Path | None,
) -> SourceEmbedding:
    """Embed every graph of source ``base``.

    Molecule sources give all their molecules (every split) in source row order, with the rows they could not
    read as ``skipped``; other sources give their train then validation graphs at their default sizes, drawn
    from ``seed`` as an alignment dataset of that seed would draw them.
    """
    from engine.gape.data import MoleculeSpec, build_molecules
    from engine.sources import SOURCES, MoleculeSource, data_root, params_dict, parse_params

    check_embedding_fits(base, params, seed, frozen.out_dim)
    cls = SOURCES.get(base)
    if isinstance(cls, type) and issubclass(cls, MoleculeSource):
        data, _ = build_molecules(MoleculeSpec(base, dict(params), seed), datasets_dir, raw_root)
        order = np.argsort(data.arrays["rows"], kind="stable")
        graphs = data.graphs()
        graphs = [graphs[int(i)] for i in order]
        skipped = data.arrays["skipped"]
        notes = list(data.meta.get("notes", []))
    else:
        from engine.alignment.datasets import FORMAT_VERSION
        from engine.cache import seeded_rng

        source = cls(parse_params(cls, params))
        key = {"format": FORMAT_VERSION, "base": cls.name, "params": params_dict(source.params)}
        key.update({"n_train": cls.sizes[0], "n_val": cls.sizes[1]})
        splits = source.load(None, None, seeded_rng(seed, key), data_root(raw_root))
        graphs = splits.train + splits.val
        skipped = np.zeros(0, dtype=np.int64)
        notes = [n for n in [splits.report.summary(), *splits.report.notes] if n]
    num_nodes = np.array([g.num_nodes for g in graphs], dtype=np.int64)
    return SourceEmbedding(num_nodes, frozen.embed_graphs(graphs), np.asarray(skipped, np.int64), frozen.run, notes)
