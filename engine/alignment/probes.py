"""Probes of a finished alignment run: what its node embeddings know, and how each of its layers behaves.

- **Edge reconstruction** (:mod:`engine.alignment.reconstruction`): a logistic probe on node-pair features,
  trained on the base graphs G of some training pairs and tested on the base graphs of validation pairs, for the
  output embeddings and for every layer. The paper's second version (arXiv 2505.13087 v2) reports that
  embeddings learned by alignment recover a graph's edges with 98% accuracy.
- **Per layer**, on validation pairs, the measures of the authors' ``ngab`` package (``heterophily/``: a
  per-layer smoothing measure and the stability of each node's embedding between G and its noised copy), defined
  here as follows. ``energy``: the Dirichlet energy of G's node states ``X``, ``(1/n) sum_i sum_{j in N(i)}
  |x_i - x_j|^2`` (Rusch, Bronstein and Mishra, "A survey on oversmoothing in GNNs", 2023); ``energy_ratio``:
  the same energy over what states of the same spread with no relation to the graph would have,
  ``tr(X^T L X) / (tr(Xc^T Xc) * mean degree)`` with ``Xc`` the centred states: 1 for noise, below 1 when
  neighbours are alike (smooth), 0 for states constant on each component; ``abs_cos``: the mean ``|cos|``
  between the states of two distinct nodes of G (what ``ngab``'s ``dirichlet`` computes: 1 when every node
  points the same way, over-smoothed); ``stability``: the mean cosine between a node's state in G and the state
  of its planted counterpart in G~ (``ngab`` takes ``|cos|`` at equal node indices, which its identity targets
  allow); ``unmatched``: the same cosine with a node that is not its counterpart (how high ``stability`` is by
  itself); ``nearest``: the share of nodes whose most cosine-similar node of G~ is their counterpart.

The layers are the model's input features, then every state :meth:`engine.models.ResidualGNN.layer_states`
names (``input``, ``block 1`` ..., ``output``); a user's model without ``layer_states`` gives its output only.
The report is written to ``<run folder>/probes.json`` (format in docs/probes.md) and reused while its options
stay the same; ``sections`` hold what ``gaptui show`` and the app's run detail print, without knowing the family.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from engine.alignment.reconstruction import EdgeScores, edge_probe, sample_node_pairs
from engine.errors import GaptuiError
from engine.files import atomic_write_json, read_json
from engine.tasks.run import PROBES

#: Bump when a probe's definition changes: a report of another format is computed again.
FORMAT = 1
#: The columns of the per-layer table: key, name, unit ("%": a share shown in percent).
LAYER_COLUMNS = (
    ("layer", "layer", "text"),
    ("dim", "dim", "int"),
    ("energy", "energy", ""),
    ("energy_ratio", "E/noise", ""),
    ("abs_cos", "|cos|", ""),
    ("stability", "stable", ""),
    ("unmatched", "unmatched", ""),
    ("nearest", "nearest", "%"),
    ("recon_auc", "edge AUC", ""),
    ("recon_balanced", "edge bacc", "%"),
)
RECON_COLUMNS = (
    ("accuracy", "accuracy", "%"),
    ("majority", "majority", "%"),
    ("balanced_accuracy", "balanced acc.", "%"),
    ("auc", "AUC", ""),
    ("edge_rate", "edges among pairs", "%"),
)


@dataclass(frozen=True)
class ProbeOptions:
    """How much a probe reads: validation pairs (the per-layer measures and the reconstruction's test graphs),
    training pairs whose G trains the reconstruction probe, node pairs drawn per graph, and the seed of every
    draw."""

    pairs: int = 100
    graphs: int = 100
    node_pairs: int = 1000
    seed: int = 0
    batch_size: int = 50

    def check(self) -> None:
        for key in ("pairs", "graphs", "node_pairs", "batch_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise GaptuiError(f"--{key.replace('_', '-')} {value}: expected a count >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise GaptuiError(f"--seed {self.seed}: expected a seed >= 0")


@dataclass
class LayerTally:
    """Running sums of one layer's measures over the validation pairs, and G's node states for the probe."""

    name: str
    dim: int
    graphs: int = 0
    energy: float = 0.0
    ratio: float = 0.0
    ratio_graphs: int = 0
    abs_cos: float = 0.0
    nodes: int = 0
    stability: float = 0.0
    unmatched: float = 0.0
    nearest: float = 0.0
    g_states: list[torch.Tensor] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        def mean(total: float, count: int) -> float | None:
            return total / count if count else None

        return {
            "layer": self.name,
            "dim": self.dim,
            "energy": mean(self.energy, self.graphs),
            "energy_ratio": mean(self.ratio, self.ratio_graphs),
            "abs_cos": mean(self.abs_cos, self.graphs),
            "stability": mean(self.stability, self.nodes),
            "unmatched": mean(self.unmatched, self.nodes),
            "nearest": mean(self.nearest, self.nodes),
        }


def batch_states(model: torch.nn.Module, batch: Any, features: str) -> list[tuple[str, torch.Tensor]]:
    """Both graphs' states ``[2N, d]`` at every layer for a siamese batch: the input features, then the model's
    named layer states (its output alone when it names none)."""
    from engine.alignment.training import siamese_inputs

    x, edge_index = siamese_inputs(model, batch, features)
    states = getattr(model, "layer_states", None)
    named = states(x, edge_index, batch.batch) if callable(states) else [("output", model(x, edge_index, batch.batch))]
    return [("features", x), *named]


def tally_layer(tally: LayerTally, states: torch.Tensor, batch: Any, shift: torch.Tensor) -> None:
    """Add one batch's measures of one layer to ``tally`` (``states [2N, d]``: G's nodes, then G~'s; ``shift``
    ``[B]`` in ``1 .. n - 1`` picks each pair's unmatched node)."""
    from torch_geometric.utils import to_dense_batch

    total, size = batch.total_nodes, batch.size
    states = states.float()
    g, gb = states[:total], batch.batch[:total]
    n = batch.num_nodes.to(states.dtype)
    src, dst = batch.edge_index[:, batch.edge_index[0] < total]
    sq = ((g[src] - g[dst]) ** 2).sum(1)
    directed = torch.zeros(size, dtype=states.dtype, device=states.device).index_add_(0, gb[src], sq)
    degree = torch.bincount(gb[src], minlength=size).to(states.dtype) / n
    centred = g - (torch.zeros(size, g.shape[1], device=g.device).index_add_(0, gb, g) / n[:, None])[gb]
    spread = torch.zeros(size, dtype=states.dtype, device=states.device).index_add_(0, gb, (centred**2).sum(1))
    scale = torch.zeros(size, dtype=states.dtype, device=states.device).index_add_(0, gb, (g**2).sum(1))
    defined = (spread > 1e-9 * scale.clamp_min(1e-30)) & (degree > 0)
    tally.graphs += size
    tally.energy += float((directed / n).sum())
    tally.ratio += float((directed[defined] / 2 / spread[defined] / degree[defined]).sum())
    tally.ratio_graphs += int(defined.sum())

    xg, mask = to_dense_batch(F.normalize(g, dim=1), gb, batch_size=size)
    xh, _ = to_dense_batch(F.normalize(states[total:], dim=1), batch.batch[total:] - size, batch_size=size)
    within = (xg @ xg.transpose(1, 2)).abs()
    pair_mask = mask[:, :, None] & mask[:, None, :]
    pair_mask &= ~torch.eye(mask.shape[1], dtype=torch.bool, device=mask.device)[None]
    tally.abs_cos += float(((within * pair_mask).sum((1, 2)) / (n * n)).sum())

    target = batch.target.clamp_min(0)
    matched = (xg * torch.gather(xh, 1, target[:, :, None].expand_as(xg))).sum(-1)
    other = (target + shift[:, None]) % batch.num_nodes[:, None]
    unmatched = (xg * torch.gather(xh, 1, other[:, :, None].expand_as(xg))).sum(-1)
    sim = (xg @ xh.transpose(1, 2)).masked_fill(~mask[:, None, :], float("-inf"))
    hits = sim.argmax(-1) == target
    tally.nodes += int(mask.sum())
    tally.stability += float(matched[mask].sum())
    tally.unmatched += float(unmatched[mask].sum())
    tally.nearest += float(hits[mask].sum())


def _chosen(count: int, want: int, rng: np.random.Generator) -> np.ndarray:
    """``min(want, count)`` indices of ``count``, drawn without replacement, sorted."""
    return np.sort(rng.choice(count, size=min(want, count), replace=False)).astype(np.int64)


def _batches(tensors: Any, ids: np.ndarray, batch_size: int) -> Iterator[Any]:
    for lo in range(0, ids.size, batch_size):
        yield tensors.gather(torch.as_tensor(ids[lo : lo + batch_size]))


def _g_edges(split: Any, ids: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Orders and ``[E, 2]`` edge lists (``i < j``) of the base graphs G of pairs ``ids``."""
    edges = []
    for p in ids.tolist():
        _, g, _, _ = split.pair(p)
        edges.append(np.ascontiguousarray(g[:, g[0] < g[1]].T))
    return split.num_nodes[ids].astype(np.int64), edges


@dataclass
class ProbeInputs:
    """What probing a run needs: its frozen model, spec and dataset."""

    run_dir: Path
    frozen: Any
    spec: Any
    dataset: Any


def open_probe_inputs(run_dir: Path, datasets_dir: Path, raw_root: Path | None, device: str = "cpu") -> ProbeInputs:
    """The frozen model and the dataset of the finished alignment run in ``run_dir``; refuses (one line) a run
    of another family, one not done, the training-free baseline and a checkpoint of another spec."""
    from engine.alignment.datasets import build_dataset
    from engine.alignment.spec import RunSpec
    from engine.gape.embed import load_frozen

    run_dir = Path(run_dir)
    raw = read_json(run_dir / "spec.json")
    task = raw.get("task", "alignment") if isinstance(raw, dict) else None
    if task != "alignment":
        what = f"a {task} run" if isinstance(task, str) else "not a readable run spec"
        raise GaptuiError(f"run {run_dir.name}: {what}; probes read finished alignment runs only")
    frozen = load_frozen(run_dir, device)
    spec = RunSpec.from_file(run_dir / "spec.json")
    datasets = Path(spec.datasets_dir) if spec.datasets_dir else Path(datasets_dir)
    raw_data = Path(spec.data_root) if spec.data_root else raw_root
    dataset, _ = build_dataset(spec.dataset_spec(), datasets, raw_data)
    return ProbeInputs(run_dir, frozen, spec, dataset)


def cached_report(run_dir: Path, options: ProbeOptions, run_hash: str) -> dict[str, Any] | None:
    """The report in ``run_dir`` when it was computed for this run with these options, else None."""
    report = read_json(Path(run_dir) / PROBES)
    if not isinstance(report, dict) or report.get("format") != FORMAT or report.get("run") != run_hash:
        return None
    return report if report.get("options") == asdict(options) else None


def probe_run(inputs: ProbeInputs, options: ProbeOptions, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every probe of the run; written to ``<run folder>/probes.json`` and returned."""
    from engine.alignment.features import dataset_positional
    from engine.alignment.training import PairTensors

    options.check()
    started = time.perf_counter()
    frozen, spec, dataset = inputs.frozen, inputs.spec, inputs.dataset
    rng = np.random.default_rng(options.seed)
    loaded = {}
    for name in ("train", "val"):
        split = dataset.split(name)
        positional = dataset_positional(dataset, name, split, spec.features, log)
        loaded[name] = (split, PairTensors(split, frozen.device, positional=positional))
    if not len(loaded["val"][0]):
        raise GaptuiError(f"run {inputs.run_dir.name}: its dataset {dataset.id} has no validation pairs to probe")
    val_ids = _chosen(len(loaded["val"][0]), options.pairs, rng)
    train_ids = _chosen(len(loaded["train"][0]), options.graphs, rng)
    tallies = _tally_validation(frozen, loaded["val"][1], val_ids, spec.features, options, rng)
    train_states = _g_states(frozen, loaded["train"][1], train_ids, spec.features, options.batch_size)
    train_sample = sample_node_pairs(*_g_edges(loaded["train"][0], train_ids), options.node_pairs, rng)
    test_sample = sample_node_pairs(*_g_edges(loaded["val"][0], val_ids), options.node_pairs, rng)
    rows, output_scores = [], None
    for tally, states in zip(tallies, train_states, strict=True):
        scores = edge_probe(states, train_sample, torch.cat(tally.g_states), test_sample)
        if log:
            log(f"{tally.name}: edge AUC {scores.auc:.3f}")
        rows.append({**tally.row(), "recon_auc": scores.auc, "recon_balanced": scores.balanced_accuracy})
        if tally.name == "output":
            output_scores = scores
    assert output_scores is not None  # every model's last state is its output
    report = _report(inputs, options, rows, output_scores, (train_ids.size, val_ids.size))
    report["seconds"] = round(time.perf_counter() - started, 3)
    atomic_write_json(inputs.run_dir / PROBES, report, indent=1)
    return report


@torch.no_grad()
def _tally_validation(
    frozen: Any, tensors: Any, ids: np.ndarray, features: str, options: ProbeOptions, rng: np.random.Generator
) -> list[LayerTally]:
    tallies: list[LayerTally] = []
    for batch in _batches(tensors, ids, options.batch_size):
        states = batch_states(frozen.model, batch, features)
        if not tallies:
            tallies = [LayerTally(name, int(s.shape[1])) for name, s in states]
        n = batch.num_nodes.cpu().numpy()
        shift = torch.as_tensor(1 + rng.integers(0, np.maximum(n - 1, 1)), device=batch.num_nodes.device)
        for tally, (_, s) in zip(tallies, states, strict=True):
            tally_layer(tally, s, batch, shift)
            tally.g_states.append(s[: batch.total_nodes].float().cpu())
    return tallies


@torch.no_grad()
def _g_states(frozen: Any, tensors: Any, ids: np.ndarray, features: str, batch_size: int) -> list[torch.Tensor]:
    """G's node states of pairs ``ids`` at every layer, stacked in pair order: one ``[N, d]`` per layer."""
    parts: list[list[torch.Tensor]] = []
    for batch in _batches(tensors, ids, batch_size):
        states = batch_states(frozen.model, batch, features)
        parts = parts or [[] for _ in states]
        for kept, (_, s) in zip(parts, states, strict=True):
            kept.append(s[: batch.total_nodes].float().cpu())
    return [torch.cat(p) for p in parts]


def _clean(value: Any) -> Any:
    """JSON-safe: ``nan`` becomes None (shown as a dash), floats rounded to 6 significant digits."""
    if isinstance(value, float):
        return None if not math.isfinite(value) else float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _report(
    inputs: ProbeInputs, options: ProbeOptions, rows: list[dict[str, Any]], output: EdgeScores, counts: tuple[int, int]
) -> dict[str, Any]:
    from engine.tasks import family

    spec = inputs.spec
    train_graphs, test_graphs = counts
    recon = {**output.to_dict(), "train_graphs": train_graphs, "test_graphs": test_graphs}
    recon_title = (
        f"edge reconstruction from the output embeddings: logistic probe trained on G of {train_graphs} training "
        f"pairs, tested on G of {test_graphs} validation pairs, up to {options.node_pairs} node pairs per graph "
        f"({output.train_pairs:,} / {output.test_pairs:,} pairs)"
    )
    layers_title = (
        f"per layer, over G of {test_graphs} validation pairs (energy, mean |cos|, edge probe) and their noised "
        "copies (stability, unmatched and nearest: cosine to the planted counterpart in G~)"
    )
    return _clean(
        {
            "format": FORMAT,
            "run": spec.run_id(),
            "task": "alignment",
            "describe": family("alignment").describe(spec),
            "dataset": inputs.dataset.id,
            "options": asdict(options),
            "computed": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "reconstruction": recon,
            "layers": rows,
            "sections": [
                {"title": recon_title, "columns": _columns(RECON_COLUMNS), "rows": [recon]},
                {"title": layers_title, "columns": _columns(LAYER_COLUMNS), "rows": rows},
            ],
        }
    )


def _columns(spec: tuple[tuple[str, str, str], ...]) -> list[dict[str, str]]:
    return [{"key": key, "name": name, "unit": unit} for key, name, unit in spec]


def read_report(run_dir: Path) -> dict[str, Any] | None:
    """The probes of the run in ``run_dir`` as last written, or None."""
    report = read_json(Path(run_dir) / PROBES)
    return report if isinstance(report, dict) and report.get("format") == FORMAT else None
