"""Base graph sources: the registry, typed parameters, and the splits a source hands to the dataset builder."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from engine.errors import GaptuiError, did_you_mean
from engine.graphs import Graph, NormalisationReport, simple_graph
from engine.registry import Registry
from engine.typed import coerce, type_hints


@dataclass
class BaseSplits:
    """The base graphs of a dataset, before noise: one list per split."""

    train: list[Graph]
    val: list[Graph]
    report: NormalisationReport = field(default_factory=NormalisationReport)
    #: Per split, the graphs without alignment signal (:func:`has_alignment_signal`) the source already left
    #: out before drawing its sample; the dataset builder adds those it leaves out itself.
    left_out: dict[str, int] = field(default_factory=dict)
    #: Prepared pairs (the ``pairs`` source): per split the corrupted copy of each base graph, node ``i`` of one
    #: being node ``i`` of the other. The dataset builder then relabels them instead of noising the base graphs.
    partners: dict[str, list[Graph]] | None = None
    #: ``{file name: SHA-256}`` of the files the graphs were read from, recorded in the dataset's statistics.
    files: dict[str, str] = field(default_factory=dict)


def has_alignment_signal(graph: Graph) -> bool:
    """Whether an alignment pair of ``graph`` can teach anything: at least 2 nodes and 1 edge (a graph without
    edges has all its nodes alike, a 1-node graph one trivial matching)."""
    return graph.num_nodes >= 2 and graph.num_edges > 0


@dataclass(frozen=True)
class NoParams:
    pass


class Source:
    """A named base-graph dataset.

    Subclasses set ``name``, ``description``, ``Params`` (a frozen dataclass of typed parameters with defaults),
    ``noise_model`` (the paper's choice for this kind of graph) and ``sizes`` (default train / validation
    counts; ``None`` means "all of the split") and implement :meth:`load`.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    noise_model: ClassVar[str] = "add_remove"
    sizes: ClassVar[tuple[int | None, int | None]] = (5000, 500)
    #: Embedding dimension models use by default on this kind of graph (the paper: 64, 32 for molecules).
    embedding_dim: ClassVar[int] = 64
    #: Extra keyword parameters are accepted and passed through untyped (user PyG datasets).
    open_params: ClassVar[bool] = False

    def __init__(self, params: Any) -> None:
        self.params = params

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        """Return ``n_train`` training and ``n_val`` validation base graphs (``None``: the source's default)."""
        raise NotImplementedError

    def check_files(self, root: Path) -> None:
        """Check the files this source reads (present, text, readable records) before any run is planned on it:
        GaptuiError naming the file and what is wrong. Sources that read no user file check nothing."""

    def source_files(self, root: Path) -> dict[str, str]:
        """``{file name: SHA-256}`` of the user's files this source reads (empty for a source that reads none, or
        whose files are gone): recorded with a dataset built from them, which is built again once they change."""
        return {}

    @classmethod
    def size_hint(cls, params: Any) -> tuple[float, float, bool] | None:
        """``(nodes per graph, mean degree, draws an n x n matrix per graph)`` known from the parameters alone,
        for memory estimates before building (:mod:`engine.memory`); None when only loading tells."""
        return None

    @classmethod
    def count_hint(cls, params: Any) -> int | None:
        """How many graphs the source holds or draws, known from the parameters alone (a user-given count), for
        memory estimates before building; None when only loading tells or the split sizes decide."""
        return None


SOURCES: Registry[type[Source]] = Registry("base dataset")


def register_source(cls: type[Source]) -> type[Source]:
    SOURCES.register(cls.name)(cls)
    return cls


def data_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Folder holding the raw files of real datasets: ``root``, else ``$GAPTUI_DATA``, else ``./gaptui-data``."""
    return Path(root or os.environ.get("GAPTUI_DATA") or "gaptui-data").expanduser().resolve()


def parse_params(source: type[Source], raw: Mapping[str, Any], where: str = "--param", strict: bool = False) -> Any:
    """Build ``source.Params`` from ``raw`` (command-line strings, or typed values with ``strict``: a preset's
    ``params``, where a quoted number is refused, see :func:`engine.typed.coerce`). Unknown keys get a
    did-you-mean."""
    fields = {f.name: f for f in dataclasses.fields(source.Params)}
    hints = type_hints(source.Params)
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in raw.items():
        if key in fields:
            shown = repr(value) if strict else value
            known[key] = coerce(value, hints[key], f"{where} {key}={shown} ({source.name})", strict)
        elif source.open_params:
            extra[key] = _json_or_text(value)
        else:
            names = ", ".join(fields) or "none"
            raise GaptuiError(
                f"{where}: '{source.name}' has no parameter '{key}'{did_you_mean(key, fields)}; its parameters: {names}"
            )
    params = source.Params(**known)
    if source.open_params:
        object.__setattr__(params, "extra", dict(sorted(extra.items())))
    check = getattr(params, "check", None)
    if check is not None:
        check()
    return params


def check_source_files(base: str, params: Mapping[str, Any], root: Path) -> None:
    """:meth:`Source.check_files` of the source ``base`` with ``params`` (a planning-time check)."""
    cls = SOURCES.get(base)
    cls(parse_params(cls, params)).check_files(root)


def check_sources_files(datasets: Iterable[tuple[str, Mapping[str, Any], Path]]) -> None:
    """:func:`check_source_files` of each ``(base, params, data root)``, every failing dataset said: one
    GaptuiError of one line per dataset (a grid missing four real datasets names the four)."""
    problems: list[str] = []
    for base, params, root in datasets:
        try:
            check_source_files(base, params, root)
        except GaptuiError as exc:
            if str(exc) not in problems:
                problems.append(str(exc))
    if problems:
        raise GaptuiError("\n".join(problems))


def _json_or_text(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def params_dict(params: Any) -> dict[str, Any]:
    """The canonical dict of a Params instance (plus pass-through extras), for hashing and display."""
    out = dataclasses.asdict(params)
    out.update(getattr(params, "extra", {}) or {})
    return dict(sorted(out.items()))


def parse_param_args(items: list[str] | None) -> dict[str, str]:
    """Parse repeated ``key=value`` command-line items."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise GaptuiError(f"--param '{item}': expected key=value")
        out[key] = value.strip()
    return out


def graphs_from_edge_lists(
    items: list[tuple[int, np.ndarray]], names: list[str] | None = None, *, keep_empty: bool = False
) -> tuple[list[Graph], NormalisationReport]:
    """Normalise ``(num_nodes, edge_index)`` items into graphs; refuses graphs without nodes or edges, unless
    ``keep_empty`` (collections where a few such graphs are expected, e.g. molecules that are single ions: the
    dataset builder leaves them out of alignment pairs and counts them)."""
    report = NormalisationReport()
    graphs: list[Graph] = []
    for i, (num_nodes, edge_index) in enumerate(items):
        label = names[i] if names else f"graph {i}"
        if num_nodes <= 0 and not keep_empty:
            raise GaptuiError(f"{label} is empty (no nodes): an alignment pair needs a graph with edges")
        graph, rep = simple_graph(num_nodes, edge_index)
        if graph.num_edges == 0 and not keep_empty:
            raise GaptuiError(f"{label} is empty (no edges): an alignment pair needs a graph with edges")
        report.add(rep)
        graphs.append(graph)
    return graphs, report


def split_counts(
    name: str, available_train: int, available_val: int, n_train: int | None, n_val: int | None
) -> tuple[int, int]:
    """Resolve requested split sizes against what a fixed-split dataset holds."""
    n_train = available_train if n_train is None else n_train
    n_val = available_val if n_val is None else n_val
    if n_train > available_train:
        raise GaptuiError(f"{name}: --train {n_train} asks for more graphs than the split holds ({available_train})")
    if n_val > available_val:
        raise GaptuiError(f"{name}: --val {n_val} asks for more graphs than the split holds ({available_val})")
    return n_train, n_val


def subset(graphs: list[Graph], count: int, rng: np.random.Generator) -> list[Graph]:
    """``count`` graphs drawn without replacement (all of them, in order, when ``count`` covers the list)."""
    if count >= len(graphs):
        return list(graphs)
    idx = np.sort(rng.choice(len(graphs), size=count, replace=False))
    return [graphs[i] for i in idx]


# ---------------------------------------------------------------------------------------------------------------
# Molecule sources: graphs with atom types and a regression target, for downstream tasks and as alignment bases.

MOLECULE_SPLITS = ("train", "val", "test")


@dataclass
class MoleculeSet:
    """The molecules of a molecule source, in source order, with their splits.

    Every graph holds heavy atoms in RDKit atom order, ``node_types`` (int64 ``[num_nodes]``, atom types for an
    ``nn.Embedding``) and ``target`` (float, ``nan`` when the source has none). ``splits`` maps ``train``, ``val``
    and, where one exists, ``test`` to sorted int64 indices into ``graphs``; ``rows`` is each graph's row in the
    source (0-based data rows or records) and ``skipped`` the rows left out, each reported once in ``notes``.
    """

    graphs: list[Graph]
    splits: dict[str, np.ndarray]
    rows: np.ndarray
    skipped: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Whether the splits are the dataset's official ones (else drawn from the seed).
    official: bool = False
    target_name: str = "target"


def seeded_splits(
    count: int, val_fraction: float, test_fraction: float, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Random train / val / test indices of ``count`` items (val and test rounded up; no test when 0)."""
    import math

    perm = rng.permutation(count)
    k_val = math.ceil(round(val_fraction * count, 9))
    k_test = math.ceil(round(test_fraction * count, 9))
    if count - k_val - k_test < 1:
        raise GaptuiError(
            f"{count} molecules cannot be split with val_fraction={val_fraction} and test_fraction={test_fraction}: "
            "no training molecule would be left"
        )
    out = {"train": np.sort(perm[k_val + k_test :]), "val": np.sort(perm[:k_val])}
    if k_test:
        out["test"] = np.sort(perm[k_val : k_val + k_test])
    return out


class MoleculeSource(Source):
    """A source of molecules: :meth:`molecules` for downstream regression; :meth:`load` makes it an alignment base.

    The alignment view takes the train and val molecules that have bonds (an alignment pair needs edges; the
    others are counted in ``left_out``), then ``n_train`` / ``n_val`` of them at random (``None``: all).
    """

    noise_model = "add"
    embedding_dim = 32
    sizes = (None, None)

    def molecules(self, rng: np.random.Generator, root: Path) -> MoleculeSet:
        """Every molecule with its atom types, target and split (``rng`` draws seeded splits and subsets)."""
        raise NotImplementedError

    def load(self, n_train: int | None, n_val: int | None, rng: np.random.Generator, root: Path) -> BaseSplits:
        mols = self.molecules(rng, root)
        report = NormalisationReport()
        report.notes.extend(mols.notes)
        picked: list[list[Graph]] = []
        left_out: dict[str, int] = {}
        for split, count in (("train", n_train), ("val", n_val)):
            bonded = [mols.graphs[i] for i in mols.splits[split] if has_alignment_signal(mols.graphs[i])]
            dropped = left_out[split] = len(mols.splits[split]) - len(bonded)
            if dropped:
                report.notes.append(
                    f"{self.name}: {dropped} {split} molecules without bonds left out of alignment pairs"
                )
            if count is not None and count > len(bonded):
                raise GaptuiError(
                    f"{self.name}: --{split} {count} asks for more molecules with bonds than the split holds "
                    f"({len(bonded)})"
                )
            picked.append(bonded if count is None else subset(bonded, count, rng))
        report.graphs = len(picked[0]) + len(picked[1])
        return BaseSplits(picked[0], picked[1], report, left_out)


def molecule_graph(num_atoms: int, edge_index: np.ndarray, atom_types: np.ndarray, target: float) -> Graph:
    """A molecule as a :class:`Graph`: ``edge_index [2, E]`` (any direction) over ``num_atoms`` heavy atoms in the
    source's atom order, ``atom_types [num_atoms]`` ints, ``target`` a float (``nan``: none)."""
    graph, _ = simple_graph(num_atoms, edge_index)
    types = np.asarray(atom_types, dtype=np.int64).reshape(-1)
    if types.size != num_atoms:
        raise ValueError(f"{types.size} atom types for {num_atoms} atoms")
    return Graph(graph.num_nodes, graph.edges, types, float(target))
