"""Base graph sources: the registry, typed parameters, and the splits a source hands to the dataset builder."""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from engine.errors import GaptuiError, did_you_mean
from engine.graphs import Graph, NormalisationReport, simple_graph
from engine.registry import Registry
from engine.typed import coerce


@dataclass
class BaseSplits:
    """The base graphs of a dataset, before noise: one list per split."""

    train: list[Graph]
    val: list[Graph]
    report: NormalisationReport = field(default_factory=NormalisationReport)


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


SOURCES: Registry[type[Source]] = Registry("base dataset")


def register_source(cls: type[Source]) -> type[Source]:
    SOURCES.register(cls.name)(cls)
    return cls


def data_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Folder holding the raw files of real datasets: ``root``, else ``$GAPTUI_DATA``, else ``./gaptui-data``."""
    return Path(root or os.environ.get("GAPTUI_DATA") or "gaptui-data").expanduser().resolve()


def parse_params(source: type[Source], raw: Mapping[str, Any], where: str = "--param") -> Any:
    """Build ``source.Params`` from ``raw`` (strings or typed values). Unknown keys get a did-you-mean."""
    fields = {f.name: f for f in dataclasses.fields(source.Params)}
    hints = typing.get_type_hints(source.Params)
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in raw.items():
        if key in fields:
            known[key] = coerce(value, hints[key], f"{where} {key}={value} ({source.name})")
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
    items: list[tuple[int, np.ndarray]], names: list[str] | None = None
) -> tuple[list[Graph], NormalisationReport]:
    """Normalise ``(num_nodes, edge_index)`` items into graphs; refuses graphs without nodes or edges."""
    report = NormalisationReport()
    graphs: list[Graph] = []
    for i, (num_nodes, edge_index) in enumerate(items):
        label = names[i] if names else f"graph {i}"
        if num_nodes <= 0:
            raise GaptuiError(f"{label} is empty (no nodes): an alignment pair needs a graph with edges")
        graph, rep = simple_graph(num_nodes, edge_index)
        if graph.num_edges == 0:
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
