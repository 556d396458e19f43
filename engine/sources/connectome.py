"""Real alignment pairs with known truth: mouse connectomes of one atlas, paired across individuals.

graspologic (MIT) bundles 32 mouse connectomes from diffusion MRI (Wang et al., NeuroImage 2020, "Variability and
heritability of mouse brain structure"): 8 mice each of 4 genotypes (BTBR, B6, CAST, DBA2), every connectome on the
same 332 regions of one atlas (166 per hemisphere). Two mice's connectomes are two graphs on the same nodes, so node
``i`` of one corresponds to node ``i`` of the other: an alignment pair whose noise is the real difference between
individuals, not one drawn by gaptui. The dataset builder relabels the second graph by a seeded permutation, as it
does for every pair.

Read from graspologic's own files (its ``datasets/mice`` folder: ``participants.csv`` and one weighted edge list
per mouse, ``edgelists/sub-<id>_ses-1_dti.edgelist``, lines ``u v weight``, undirected), without importing
graspologic (see :mod:`engine.sources.packaged`). The weights count reconstructed fibres between two regions; a
mouse's graph keeps its ``density`` share of strongest pairs (or the edges of weight ``>= threshold``), unweighted.
The mice are split into training and validation mice (``val_subjects``, spread over the genotypes, drawn from
``split_seed``), so no mouse's graph is in both splits; every ordered pair of distinct mice of a split (of the same
genotype with ``pairing = "within"``) is a pair. With ``partner = "self"`` each pair's second graph is instead the
first mouse's own graph noised by ``--noise``: the same base graphs under synthetic noise, to compare with the real
one.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import GaptuiError, did_you_mean
from engine.graphs import Graph, NormalisationReport, simple_graph
from engine.sources.base import BaseSplits, Source, register_source
from engine.sources.fetch import pick
from engine.sources.packaged import PackagedData, files_print

MICE = PackagedData(
    source="connectome",
    distribution="graspologic",
    folder="graspologic/datasets/mice",
    files=("participants.csv", "edgelists"),
    install=(
        "pip install 'gaptui[connectome]' (graspologic and its ~20 dependencies, numpy held below 2), or only its "
        "data: pip install --no-deps graspologic==3.4.4"
    ),
)
PAIRINGS = ("within", "across", "any")
PARTNERS = ("other", "self")
#: Regions of the atlas (graspologic's mice: 166 per hemisphere).
ATLAS_NODES = 332


def _edge_file(subject: str) -> str:
    return f"edgelists/{subject}_ses-1_dti.edgelist"


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


@dataclass(frozen=True)
class ConnectomeParams:
    #: A folder laid out as graspologic's ``datasets/mice``; empty: the installed graspologic's.
    path: str = ""
    #: Each mouse keeps its strongest edges, this share of the node pairs (0: keep by ``threshold`` instead).
    density: float = 0.1
    #: With ``density = 0``: keep the edges of weight >= threshold (0: every edge the file lists).
    threshold: float = 0.0
    #: Pairs of mice of the same genotype (``within``), of different genotypes (``across``) or ``any``.
    pairing: str = "within"
    #: Only these genotypes (comma-separated: BTBR, B6, CAST, DBA2); empty: all.
    genotypes: str = ""
    #: Only these mice (comma-separated ids, ``54776`` or ``sub-54776``); empty: all.
    subjects: str = ""
    #: Mice held out for the validation pairs, spread over the genotypes.
    val_subjects: int = 8
    #: Seed of the choice of validation mice (not the dataset's seed: every seed and both partners hold out the
    #: same mice, so their results compare on the same graphs).
    split_seed: int = 0
    #: ``other``: a pair's second graph is another mouse's (real noise); ``self``: the same mouse's, noised by --noise.
    partner: str = "other"

    def check(self) -> None:
        if not 0 <= self.density < 1:
            raise GaptuiError(f"--param density={self.density} (connectome): expected a share in [0, 1)")
        if self.threshold < 0 or (self.density and self.threshold):
            raise GaptuiError(
                f"--param threshold={self.threshold} (connectome): expected a weight >= 0, and density=0 with it "
                f"(density={self.density} already chooses the edges)"
            )
        for key, value, choices in (("pairing", self.pairing, PAIRINGS), ("partner", self.partner, PARTNERS)):
            if value not in choices:
                raise GaptuiError(
                    f"--param {key}={value} (connectome): expected one of {', '.join(choices)}"
                    f"{did_you_mean(value, choices)}"
                )
        for key in ("val_subjects", "split_seed"):
            if getattr(self, key) < 0:
                raise GaptuiError(f"--param {key}={getattr(self, key)} (connectome): expected a number >= 0")


@dataclass(frozen=True)
class Mouse:
    subject: str
    genotype: str


def read_participants(folder: Path) -> list[Mouse]:
    """The mice of ``participants.csv`` (columns ``participant_id``, ``genotype``), in file order."""
    path = folder / "participants.csv"
    try:
        rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise GaptuiError(f"connectome: cannot read {path}: {exc}") from None
    if not rows or not {"participant_id", "genotype"} <= set(rows[0]):
        raise GaptuiError(f"connectome: {path} needs the columns participant_id and genotype")
    return [Mouse(r["participant_id"].strip(), r["genotype"].strip()) for r in rows]


def chosen_mice(params: ConnectomeParams, folder: Path) -> list[Mouse]:
    """The mice the parameters name (every one by default); an unknown subject or genotype is one error line."""
    mice = read_participants(folder)
    ids = [m.subject for m in mice]
    genotypes = sorted({m.genotype for m in mice})
    for genotype in _names(params.genotypes):
        if genotype not in genotypes:
            raise GaptuiError(
                f"connectome: --param genotypes: no genotype '{genotype}' in {folder / 'participants.csv'}"
                f"{did_you_mean(genotype, genotypes)}; genotypes: {', '.join(genotypes)}"
            )
    wanted = [s if s.startswith("sub-") else f"sub-{s}" for s in _names(params.subjects)]
    for subject in wanted:
        if subject not in ids:
            raise GaptuiError(
                f"connectome: --param subjects: no subject '{subject}' in {folder / 'participants.csv'}"
                f"{did_you_mean(subject, ids)}; it lists {len(ids)} ({', '.join(ids[:3])}, ...)"
            )
    keep = [
        m
        for m in mice
        if (not wanted or m.subject in wanted) and (not params.genotypes or m.genotype in _names(params.genotypes))
    ]
    for mouse in keep:
        if not (folder / _edge_file(mouse.subject)).is_file():
            raise GaptuiError(
                f"connectome: subject {mouse.subject} has no edge list {folder / _edge_file(mouse.subject)}"
            )
    if len(keep) < 2:
        raise GaptuiError(f"connectome: {len(keep)} mouse left by --param subjects / genotypes; a pair needs two")
    return keep


def read_weights(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(edges [E, 2] with i < j, weights [E])`` of one ``u v weight`` edge list (whitespace-separated)."""
    try:
        values = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except (OSError, ValueError) as exc:
        raise GaptuiError(f"connectome: cannot read {path} as 'u v weight' lines: {exc}") from None
    if values.shape[0] and values.shape[1] != 3:
        raise GaptuiError(f"connectome: {path} has {values.shape[1]} columns; expected 3 (u v weight)")
    ends = values[:, :2]
    if values.size and (ends.min() < 0 or (ends != np.round(ends)).any() or not np.isfinite(values[:, 2]).all()):
        raise GaptuiError(f"connectome: {path}: node ids must be integers >= 0 and weights finite numbers")
    edges = np.sort(ends.astype(np.int64), axis=1)
    return edges, values[:, 2]


def keep_edges(edges: np.ndarray, weights: np.ndarray, nodes: int, params: ConnectomeParams) -> np.ndarray:
    """The edges a mouse's graph keeps: its ``density`` share of node pairs with the largest weights (ties in file
    order), or those of weight >= ``threshold``."""
    if params.density:
        count = int(round(params.density * nodes * (nodes - 1) / 2))
        order = np.argsort(-weights, kind="stable")
        return edges[order[:count]]
    return edges[weights >= params.threshold] if params.threshold else edges


def split_mice(mice: list[Mouse], count: int, rng: np.random.Generator) -> tuple[list[Mouse], list[Mouse]]:
    """``count`` validation mice drawn in turn from each genotype (shuffled), the rest for training."""
    by_genotype: dict[str, list[Mouse]] = {}
    for mouse in mice:
        by_genotype.setdefault(mouse.genotype, []).append(mouse)
    queues = [[group[i] for i in rng.permutation(len(group))] for _, group in sorted(by_genotype.items())]
    val: list[Mouse] = []
    while len(val) < min(count, len(mice) - 1):
        for queue in queues:
            if queue and len(val) < min(count, len(mice) - 1):
                val.append(queue.pop(0))
    held = {m.subject for m in val}
    return [m for m in mice if m.subject not in held], [m for m in mice if m.subject in held]


def ordered_pairs(mice: list[Mouse], pairing: str) -> list[tuple[int, int]]:
    """Every ordered pair of distinct mice (indices into ``mice``) allowed by ``pairing``."""
    out = []
    for a, first in enumerate(mice):
        for b, second in enumerate(mice):
            same = first.genotype == second.genotype
            if a != b and (pairing == "any" or same == (pairing == "within")):
                out.append((a, b))
    return out


@register_source
class Connectome(Source):
    name = "connectome"
    description = (
        "mouse connectomes (graspologic's 32 mice, 332 atlas regions): pairs across individuals, truth = the atlas; "
        "density=0.1 strongest edges; pairing=within genotype; partner=self for synthetic noise on the same graphs"
    )
    Params = ConnectomeParams
    noise_model = "add_remove"
    sizes = (None, None)

    @classmethod
    def size_hint(cls, params: Any) -> tuple[float, float, bool] | None:
        # without a density, every listed edge: about 65% of the node pairs in graspologic's mice
        share = params.density or 0.65
        return float(ATLAS_NODES), share * (ATLAS_NODES - 1), False

    @classmethod
    def count_hint(cls, params: Any) -> int | None:
        """The pairs of both splits, from ``participants.csv`` alone (no edge list read); None without the data."""
        try:
            mice = chosen_mice(params, MICE.locate(params.path))
        except GaptuiError:
            return None
        train, val = split_mice(mice, params.val_subjects, np.random.default_rng(params.split_seed))
        return len(ordered_pairs(train, params.pairing)) + len(ordered_pairs(val, params.pairing))

    def check_files(self, root: Path) -> None:
        chosen_mice(self.params, MICE.locate(self.params.path))

    def graphs(self, folder: Path, mice: list[Mouse]) -> list[Graph]:
        """Each mouse's graph on the atlas regions (the largest node id of any edge list + 1 nodes)."""
        read = [read_weights(folder / _edge_file(m.subject)) for m in mice]
        nodes = max(int(e.max()) + 1 for e, _ in read if e.size)
        out = []
        for edges, weights in read:
            loops = edges[:, 0] == edges[:, 1]
            kept = keep_edges(edges[~loops], weights[~loops], nodes, self.params)
            graph, _ = simple_graph(nodes, kept.T)
            out.append(graph)
        return out

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        p = self.params
        folder = MICE.locate(p.path)
        mice = chosen_mice(p, folder)
        graphs = dict(zip((m.subject for m in mice), self.graphs(folder, mice), strict=True))
        train_mice, val_mice = split_mice(mice, p.val_subjects, np.random.default_rng(p.split_seed))
        report = NormalisationReport()
        picked: dict[str, list[tuple[Mouse, Mouse]]] = {}
        for split, group, count in (("train", train_mice, n_train), ("val", val_mice, n_val)):
            pairs = [(group[a], group[b]) for a, b in ordered_pairs(group, p.pairing)]
            if count is not None and count > len(pairs):
                raise GaptuiError(
                    f"connectome: --{split} {count} asks for more pairs than the {len(group)} {split} mice give "
                    f"({len(pairs)} ordered pairs, pairing={p.pairing})"
                )
            picked[split] = pairs if count is None else [pairs[i] for i in pick(len(pairs), count, rng)]
        degree = np.mean([2 * g.num_edges / g.num_nodes for g in graphs.values()])
        report.notes.append(
            f"connectome: {len(train_mice)} training and {len(val_mice)} validation mice, "
            f"{len(picked['train'])} / {len(picked['val'])} ordered pairs (pairing={p.pairing}, partner={p.partner}); "
            f"mean degree {degree:.1f} on {next(iter(graphs.values())).num_nodes} regions"
        )
        report.graphs = len(graphs)
        base = {split: [graphs[a.subject] for a, _ in pairs] for split, pairs in picked.items()}
        partners = None
        if p.partner == "other":
            partners = {split: [graphs[b.subject] for _, b in pairs] for split, pairs in picked.items()}
        prints = {}
        for split, group in (("train", train_mice), ("val", val_mice)):
            names = ["participants.csv", *(_edge_file(m.subject) for m in group)]
            prints.update(files_print(folder, names, split, f"{len(names)} files of {MICE.folder}"))
        return BaseSplits(base["train"], base["val"], report, partners=partners, files=prints)
