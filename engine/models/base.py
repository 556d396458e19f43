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
from torch_geometric.nn import GraphNorm

from engine.errors import GaptuiError, did_you_mean
from engine.registry import Registry

#: Conv factory: given the block width, return one message-passing layer mapping ``[N, width] -> [N, width]``.
ConvFactory = Callable[[int], nn.Module]


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


#: Options every built-in model accepts. ``width=None`` means "chosen from the parameter budget".
COMMON_OPTIONS: dict[str, Option] = {
    "layers": Option(4, positive_int, "number of message-passing blocks"),
    "width": Option(None, optional_positive_int, "hidden width; overrides the parameter budget"),
    "dropout": Option(0.0, probability, "dropout on each block's update before the residual sum"),
}


def bad_value(model: str, key: str, value: Any, expected: str) -> GaptuiError:
    """The error for a model option with a wrong value: names the model, the key and the value."""
    return GaptuiError(f"model '{model}': {key}={value!r} is invalid: {expected}")


# --------------------------------------------------------------------------------------------- scaffold


class ResidualGNN(nn.Module):
    r"""Input projection, ``layers`` residual message-passing blocks, linear readout.

    With :math:`\operatorname{Conv}` the subclass's PyG layer and :math:`b` the batch vector,

    .. math::

        h^{(0)} = x W_{in} + b_{in}, \qquad
        h^{(l+1)} = h^{(l)} + \operatorname{ReLU}\big(\operatorname{GraphNorm}_b(\operatorname{Conv}(h^{(l)},
        A))\big), \qquad
        y = h^{(L)} W_{out} + b_{out}.

    GraphNorm normalises per graph of the batch (it is given ``batch``), so a node's embedding never depends
    on the other graphs in the batch, and every operation is permutation-equivariant. There is no dropout
    unless ``dropout > 0`` is asked for, and no state updated in the forward pass, so ``eval()`` outputs
    are deterministic.

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

    def __init__(
        self,
        conv: ConvFactory,
        *,
        width: int,
        out_dim: int = 64,
        in_dim: int = 1,
        layers: int = 4,
        dropout: float = 0.0,
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
        self.input = nn.Linear(in_dim, width)
        self.convs = nn.ModuleList(conv(width) for _ in range(layers))
        self.norms = nn.ModuleList(GraphNorm(width) for _ in range(layers))
        self.output = nn.Linear(width, out_dim)
        self.num_parameters = count_parameters(self)

    def reset_parameters(self) -> None:
        """Re-draw every parameter with its layer's own initialisation."""
        self.input.reset_parameters()
        for conv, norm in zip(self.convs, self.norms, strict=True):
            conv.reset_parameters()  # type: ignore[operator]
            norm.reset_parameters()
        self.output.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        """Embed every node: ``[N, in_dim]`` -> ``[N, out_dim]``."""
        h = self.input(x)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            update = F.relu(norm(conv(h, edge_index), batch))
            if self.dropout:
                update = F.dropout(update, p=self.dropout, training=self.training)
            h = h + update
        return self.output(h)

    def extra_repr(self) -> str:
        return f"width={self.width}, layers={self.layers}, params={self.num_parameters}"

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
    def budget_variants(cls, options: Mapping[str, Any], explicit: set[str]) -> Iterator[dict[str, Any]]:
        """Option sets the budget search may try, most preferred first; ``explicit`` are the user's keys.

        The default is just the options as given; attention models relax an unpinned head count here when
        no width at the preferred count lands within the budget tolerance.
        """
        yield dict(options)


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
