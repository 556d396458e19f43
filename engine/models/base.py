"""The shared scaffold of every built-in model: input projection, residual message-passing blocks, readout.

Each built-in model is a :class:`ResidualGNN` subclass that only says which PyG convolution one block uses;
the residual connection, the per-graph :class:`~torch_geometric.nn.GraphNorm`, the activation and the
projections live here once. Options a user may pass (``layers=3``, ``heads=4``...) are declared as
:class:`Option` entries so that ``build`` can validate them and report a bad one by model, key and value.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, GraphNorm

from engine.errors import GaptuiError, did_you_mean
from engine.models.graph_norm import graph_norm
from engine.models.sparse import Graph, GraphLayer, convolve
from engine.registry import Registry

#: Conv factory: given the block width, return one message-passing layer mapping ``[N, width] -> [N, width]``.
ConvFactory = Callable[[int], nn.Module]
#: First-layer factory (``input_layer="conv"``): given ``(in_dim, width)``, a layer ``[N, in_dim] -> [N, width]``.
FirstFactory = Callable[[int, int], nn.Module]


def default_first(in_dim: int, width: int) -> nn.Module:
    """The paper package's first layer for most models (GCN, GAT, GATv2, gated models): a ``GCNConv``.

    On constant input its symmetric normalisation makes the output depend on the degrees, which breaks the
    symmetry that would otherwise leave averaging layers (attention, mean) structure-blind.
    """
    return GCNConv(in_dim, width)


# --------------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class Option:
    """One keyword a model accepts: its default, a checker and a line of help.

    ``check`` returns the normalised value or raises :class:`ValueError` whose message says what was
    expected (``"a positive integer"``); ``build`` turns that into a :class:`GaptuiError` naming the model.
    """

    default: Any
    check: Callable[[Any], Any]
    help: str


def positive_int(value: Any) -> int:
    """An integer >= 1 (``bool`` is refused: ``layers=True`` is a typo, not a count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError("expected a positive integer")
    return int(value)


def optional_positive_int(value: Any) -> int | None:
    """``None`` (meaning "choose automatically") or an integer >= 1."""
    return None if value is None else positive_int(value)


def probability(value: Any) -> float:
    """A float in ``[0, 1)``, as a dropout rate."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) < 1.0:
        raise ValueError("expected a number in [0, 1)")
    return float(value)


def boolean(value: Any) -> bool:
    """A real ``bool`` (strings like ``"false"`` are refused rather than silently truthy)."""
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


#: How raw node features enter the model: ``linear`` projects them with a Linear layer; ``conv`` (the paper's
#: package) makes the first message-passing layer a per-model convolution from ``in_dim`` to the width; ``gcn``
#: (the authors' newer package, ``ngab``) makes it a ``GCNConv`` for every model.
INPUT_LAYERS = ("linear", "conv", "gcn")
#: Where GraphNorm sits: ``per-graph`` (ours) normalises every block's update per graph of the batch;
#: ``whole-batch`` (the paper's package) has two GraphNorms, on the state entering message-passing layer 1
#: (0-based) and on the state entering the readout, each over all the nodes of the batch at once.
NORMS = ("per-graph", "whole-batch")
#: The nonlinearity of every block (and of GIN's MLP, and of the first layer where it has one).
ACTIVATIONS = ("relu", "gelu")
#: The order inside a block with ``norm="per-graph"``: ``norm-act`` is ``h + act(GraphNorm(conv(h)))``;
#: ``act-norm`` (``ngab``) is ``h + GraphNorm(act(conv(h)))``, and a conv first layer is then normalised
#: (``GraphNorm(first(x))``) instead of activated.
BLOCKS = ("norm-act", "act-norm")


def choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    """A checker accepting one of ``choices`` (the error suggests the closest)."""

    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}{did_you_mean(str(value), choices)}")
        return value

    return check


#: Options every built-in model accepts. ``width=None`` means "chosen from the parameter budget".
COMMON_OPTIONS: dict[str, Option] = {
    "layers": Option(4, positive_int, "number of message-passing layers (with input_layer=conv, the first one)"),
    "width": Option(None, optional_positive_int, "hidden width; overrides the parameter budget"),
    "dropout": Option(0.0, probability, "dropout on each block's update before the residual sum"),
    "input_layer": Option("linear", choice(INPUT_LAYERS), "linear projection of the inputs, or conv (paper)"),
    "norm": Option("per-graph", choice(NORMS), "GraphNorm per graph in every block, or whole-batch (paper)"),
    "activation": Option("relu", choice(ACTIVATIONS), "nonlinearity of the blocks, GIN's MLP and the first layer"),
    "block": Option("norm-act", choice(BLOCKS), "act(GraphNorm(conv)) or GraphNorm(act(conv)) (ngab) per block"),
    "sparse": Option(True, boolean, "sparse-matrix aggregation where a layer allows it (false: PyG's scatter path)"),
}


def bad_value(model: str, key: str, value: Any, expected: str) -> GaptuiError:
    """The error for a model option with a wrong value: names the model, the key and the value."""
    return GaptuiError(f"model '{model}': {key}={value!r} is invalid: {expected}")


# --------------------------------------------------------------------------------------------- scaffold


class ResidualGNN(nn.Module):
    r"""Input layer, residual message-passing blocks, linear readout.

    With :math:`\operatorname{Conv}` the subclass's PyG layer and :math:`b` the batch vector, the default
    (``input_layer="linear"``, ``norm="per-graph"``) is ``layers`` blocks after a linear projection:

    .. math::

        h^{(0)} = x W_{in} + b_{in}, \qquad
        h^{(l+1)} = h^{(l)} + \operatorname{ReLU}\big(\operatorname{GraphNorm}_b(\operatorname{Conv}(h^{(l)},
        A))\big), \qquad
        y = h^{(L)} W_{out} + b_{out}.

    GraphNorm normalises per graph of the batch (it is given ``batch``), so a node's embedding never depends
    on the other graphs in the batch, and every operation is permutation-equivariant. There is no dropout
    unless ``dropout > 0`` is asked for, and no state updated in the forward pass, so ``eval()`` outputs
    are deterministic.

    The paper's package (Table C.2 counts) differs in two places, each an option. ``input_layer="conv"``:
    :math:`h^{(1)} = \operatorname{ReLU}(\operatorname{First}(x, A))` with a per-model convolution from
    ``in_dim`` to the width (:class:`~torch_geometric.nn.GCNConv` unless the model says otherwise, e.g. GIN's
    ``GINConv(Linear)``), which counts as the first of the ``layers`` message-passing layers, so ``layers - 1``
    residual blocks follow; on constant input it is what tells nodes apart (by degree). ``norm="whole-batch"``:
    no norm inside the blocks, :math:`h \leftarrow h + \operatorname{ReLU}(\operatorname{Conv}(h, A))`, and
    two GraphNorms over the whole batch (statistics shared by every graph of the batch, so embeddings depend on
    the batch they are computed in), on the state entering message-passing layer 1 (0-based) and on the state
    entering the readout.

    Three more options give the block of the authors' newer package (``ngab``): ``activation="gelu"`` (GELU
    in place of ReLU everywhere, GIN's MLP included), ``block="act-norm"`` (with per-graph norms,
    :math:`h^{(l+1)} = h^{(l)} + \operatorname{GraphNorm}_b(\operatorname{act}(\operatorname{Conv}(h^{(l)}, A)))`,
    and a conv first layer normalised instead of activated, :math:`h^{(1)} = \operatorname{GraphNorm}_b(
    \operatorname{First}(x, A))`) and ``input_layer="gcn"`` (a :class:`~torch_geometric.nn.GCNConv` first
    layer for every model, GIN included).

    Shapes: ``x`` ``[N, in_dim]`` float, ``edge_index`` ``[2, E]`` long (both directions of each edge),
    ``batch`` ``[N]`` long graph ids (``None``: a single graph) -> ``[N, out_dim]``.

    Attributes: ``width``, ``layers``, ``out_dim``, ``in_dim`` and ``num_parameters`` (trainable count).
    """

    #: Registry name, set by :func:`register`.
    name: ClassVar[str] = ""
    #: One line for ``gaptui models``.
    summary: ClassVar[str] = ""
    #: Model-specific options, on top of :data:`COMMON_OPTIONS`.
    OPTIONS: ClassVar[dict[str, Option]] = {}
    #: Why widths must be a multiple of :meth:`width_multiple` (for error messages).
    why_multiple: ClassVar[str] = ""
    #: The conv factory builds whole layers, with their own residuals and norms (GraphGPS): the scaffold then
    #: adds no norm, activation, dropout or residual sum around them, ``h <- layer(h)``.
    layer_is_block: ClassVar[bool] = False

    def __init__(
        self,
        conv: ConvFactory,
        *,
        width: int,
        out_dim: int = 64,
        in_dim: int = 1,
        layers: int = 4,
        dropout: float = 0.0,
        input_layer: str = "linear",
        norm: str = "per-graph",
        activation: str = "relu",
        block: str = "norm-act",
        sparse: bool = True,
        first: FirstFactory | None = None,
    ) -> None:
        super().__init__()
        for key, value in (("width", width), ("out_dim", out_dim), ("in_dim", in_dim), ("layers", layers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{type(self).__name__}: {key} must be a positive integer, got {value!r}")
        self.width = width
        self.out_dim = out_dim
        self.in_dim = in_dim
        self.layers = layers
        self.dropout = dropout
        if input_layer not in INPUT_LAYERS:
            raise ValueError(f"{type(self).__name__}: input_layer must be one of {INPUT_LAYERS}, got {input_layer!r}")
        if norm not in NORMS:
            raise ValueError(f"{type(self).__name__}: norm must be one of {NORMS}, got {norm!r}")
        for key, value, choices in (("activation", activation, ACTIVATIONS), ("block", block, BLOCKS)):
            if value not in choices:
                raise ValueError(f"{type(self).__name__}: {key} must be one of {choices}, got {value!r}")
        self.input_layer = input_layer
        self.norm = norm
        self.activation = activation
        self.block = block
        self.sparse = sparse
        self.act: Callable[[Tensor], Tensor] = F.gelu if activation == "gelu" else F.relu
        conv_input = input_layer != "linear"
        if input_layer == "conv":
            self.input = (first or default_first)(in_dim, width)
        else:
            self.input = default_first(in_dim, width) if conv_input else nn.Linear(in_dim, width)
        blocks = layers - 1 if conv_input else layers
        self.convs = nn.ModuleList(conv(width) for _ in range(blocks))
        per_graph = norm == "per-graph" and not self.layer_is_block
        self.norm_after_act = norm == "per-graph" and block == "act-norm"
        # act-norm with a conv first layer: that layer's output is normalised per graph instead of activated
        self.input_norm = GraphNorm(width) if self.norm_after_act and conv_input else None
        self.norms = nn.ModuleList(GraphNorm(width) for _ in range(blocks if per_graph else 0))
        # whole-batch: index (among the blocks) before which the first GraphNorm applies, then one before readout
        self.batch_norms = nn.ModuleList(GraphNorm(width) for _ in range(0 if per_graph or self.layer_is_block else 2))
        self._norm_before = 0 if conv_input else 1
        self.output = nn.Linear(width, out_dim)
        self.num_parameters = count_parameters(self)

    def reset_parameters(self) -> None:
        """Re-draw every parameter with its layer's own initialisation."""
        self.input.reset_parameters()
        if self.input_norm is not None:
            self.input_norm.reset_parameters()
        for module in (*self.convs, *self.norms, *self.batch_norms):
            module.reset_parameters()  # type: ignore[operator]
        self.output.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        """Embed every node: ``[N, in_dim]`` -> ``[N, out_dim]``."""
        return self._propagate(x, edge_index, batch, None)

    def layer_states(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> list[tuple[str, Tensor]]:
        """Every layer's node states on the way to :meth:`forward`'s output, in order, named: ``input`` (the
        state after the input layer, ``[N, width]``), ``block 1`` .. ``block B`` (after each residual block),
        ``output`` (the readout, ``[N, out_dim]``, equal to :meth:`forward`). The same computation as
        :meth:`forward` (which keeps nothing), for probes of a trained model (:mod:`engine.alignment.probes`)."""
        states: list[tuple[str, Tensor]] = []
        states.append(("output", self._propagate(x, edge_index, batch, states)))
        return states

    def _propagate(
        self, x: Tensor, edge_index: Tensor, batch: Tensor | None, states: list[tuple[str, Tensor]] | None
    ) -> Tensor:
        """The forward pass; with ``states``, each layer's state is appended to it as it is computed."""
        graph = Graph.from_edge_index(edge_index, batch, x.shape[0])
        sparse = self.sparse
        conv_of = convolve if sparse else _pyg_conv
        norm_of = graph_norm if sparse else lambda norm, h, graph: norm(h, graph.batch)
        act = self.act
        if self.input_layer == "linear":
            h = self.input(x)
        elif self.input_norm is not None:
            h = norm_of(self.input_norm, conv_of(self.input, x, graph), graph)
        else:
            h = act(conv_of(self.input, x, graph))
        if states is not None:
            states.append(("input", h))
        for i, conv in enumerate(self.convs):
            if self.layer_is_block:  # a GraphLayer holding its own residuals and norms
                h = conv_of(conv, h, graph)
                if states is not None:
                    states.append((f"block {i + 1}", h))
                continue
            if self.batch_norms and i == self._norm_before:
                h = self.batch_norms[0](h)  # no batch vector: one set of statistics for the whole batch
            update = conv_of(conv, h, graph)
            if self.norm_after_act:
                update = norm_of(self.norms[i], act(update), graph)
            else:
                if self.norms:
                    update = norm_of(self.norms[i], update, graph)
                update = act(update)
            if self.dropout:
                update = F.dropout(update, p=self.dropout, training=self.training)
            h = h + update
            if states is not None:
                states.append((f"block {i + 1}", h))
        if self.batch_norms:
            if self._norm_before >= len(self.convs):  # too few blocks: the first norm falls on the readout too
                h = self.batch_norms[0](h)
            h = self.batch_norms[1](h)
        return self.output(h)

    @property
    def reads_edge_index(self) -> bool:
        """Whether :func:`engine.alignment.training.similarity` should pass edges as a PyG ``EdgeIndex`` whose
        flags (sorted by row, undirected) spare the sparse path its sorts; PyG's own path takes plain tensors."""
        return self.sparse

    def extra_repr(self) -> str:
        extra = "".join(
            f", {key}={getattr(self, key)}"
            for key, default in (
                ("input_layer", "linear"),
                ("norm", "per-graph"),
                ("activation", "relu"),
                ("block", "norm-act"),
                ("sparse", True),
            )
            if getattr(self, key) != default
        )
        return f"width={self.width}, layers={self.layers}{extra}, params={self.num_parameters}"

    # ----------------------------------------------------------------- hooks for build and the budget search

    @classmethod
    def options(cls) -> dict[str, Option]:
        """Every keyword this model accepts besides ``out_dim``/``in_dim``/``budget``."""
        return {**COMMON_OPTIONS, **cls.OPTIONS}

    @classmethod
    def resolve_options(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """Validate user keywords and fill in defaults; a bad key or value raises :class:`GaptuiError`."""
        known = cls.options()
        resolved: dict[str, Any] = {}
        for key, value in given.items():
            if key not in known:
                raise GaptuiError(
                    f"model '{cls.name}' has no option '{key}' (got {key}={value!r})"
                    f"{did_you_mean(key, known)}; options: {', '.join(sorted(known))}"
                )
            try:
                resolved[key] = known[key].check(value)
            except ValueError as exc:
                raise bad_value(cls.name, key, value, str(exc)) from None
        for key, option in known.items():
            resolved.setdefault(key, option.default)
        cls.check_width(resolved)
        return resolved

    @classmethod
    def check_width(cls, options: Mapping[str, Any]) -> None:
        """Raise :class:`GaptuiError` when an explicit ``width`` breaks a divisibility constraint."""
        width = options.get("width")
        multiple = cls.width_multiple(options)
        if width is not None and width % multiple:
            raise bad_value(cls.name, "width", width, f"expected a multiple of {multiple} ({cls.why_multiple})")

    @classmethod
    def width_multiple(cls, options: Mapping[str, Any]) -> int:
        """Widths the model can take are multiples of this (e.g. the number of attention heads)."""
        return 1

    @classmethod
    def batch_bytes(cls, options: Mapping[str, Any], graphs: int, nodes: float) -> int:
        """Bytes a training step needs beyond the node states, for ``graphs`` graphs of about ``nodes`` nodes
        (``options`` resolved): a layer that holds a dense ``nodes x nodes`` matrix per graph says so here, so a
        grid that cannot fit is refused before it starts (:func:`engine.alignment.memory.pairs_need`). Node-sized
        tensors are in the estimate's per-node allowance already; the default is 0."""
        return 0

    @classmethod
    def budget_variants(cls, options: Mapping[str, Any], explicit: set[str]) -> Iterator[dict[str, Any]]:
        """Option sets the budget search may try, most preferred first; ``explicit`` are the user's keys.

        The default is just the options as given; attention models relax an unpinned head count here when
        no width at the preferred count lands within the budget tolerance.
        """
        yield dict(options)


def _pyg_conv(conv: nn.Module, h: Tensor, graph: Graph) -> Tensor:
    """PyG's own path (``sparse=False``): ``conv(h, edge_index)``; a layer that reads the whole graph gets it."""
    if isinstance(conv, GraphLayer):
        return conv(h, graph, fast=False)
    return conv(h, graph.edge_index)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable scalars (``requires_grad``) in ``module``; shared parameters count once."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


# --------------------------------------------------------------------------------------------- registry

#: Built-in models by name. ``MODELS.get("pkg.mod:Cls")`` imports a user's class or factory instead.
MODELS: Registry[type[ResidualGNN]] = Registry("model")


def register(name: str, summary: str) -> Callable[[type[ResidualGNN]], type[ResidualGNN]]:
    """Class decorator: register a :class:`ResidualGNN` subclass under ``name`` with a one-line summary."""

    def deco(cls: type[ResidualGNN]) -> type[ResidualGNN]:
        cls.name = name
        cls.summary = summary
        return MODELS.register(name)(cls)

    return deco
