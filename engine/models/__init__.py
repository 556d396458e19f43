"""The model registry: siamese node embedders for graph alignment, built to a parameter budget.

Contract of every model (built-in or user-supplied)::

    model = build("gcn", out_dim=64, budget=60_000, in_dim=1)
    y = model(x, edge_index, batch)   # x [N, in_dim] float, edge_index [2, E] long (both directions),
                                      # batch [N] long graph ids  ->  y [N, out_dim]

Built-ins (:data:`MODELS`, :func:`names`) choose their width so the trainable parameter count is within
5% of ``budget`` (``width=`` overrides) and carry ``model.width`` and ``model.num_parameters``.
``name`` may instead be ``"pkg.module:ClassOrFactory"``: it is called with ``out_dim``, ``budget``,
``in_dim`` and the other keywords, must return an :class:`torch.nn.Module`, and is smoke-tested on a tiny
graph so contract violations surface as a one-line :class:`GaptuiError` rather than mid-training.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from engine.errors import GaptuiError

# Importing the model modules registers the built-ins (order = order of names()).
from engine.models import convs, gat, pna, powers, transformer  # noqa: F401
from engine.models.base import MODELS, Option, ResidualGNN, bad_value, count_parameters, positive_int
from engine.models.budget import TOLERANCE, choose
from engine.models.pna import degree_histogram

__all__ = [
    "MODELS",
    "TOLERANCE",
    "ModelInfo",
    "ResidualGNN",
    "build",
    "count_parameters",
    "degree_histogram",
    "describe",
    "info",
    "names",
]

DEFAULT_OUT_DIM = 64
DEFAULT_BUDGET = 60_000


def names() -> list[str]:
    """Names of the built-in models, in registration order."""
    return MODELS.names()


@dataclass(frozen=True)
class ModelInfo:
    """What ``gaptui models`` shows for one built-in model."""

    name: str
    summary: str
    options: dict[str, Option]
    doc: str


def info(name: str) -> ModelInfo:
    """Summary, accepted options and docstring of a built-in model (unknown name: :class:`GaptuiError`)."""
    if ":" in name:
        raise GaptuiError(f"'{name}' is an import path, not a built-in model; built-ins: {', '.join(names())}")
    cls = MODELS.get(name)
    return ModelInfo(cls.name, cls.summary, cls.options(), (cls.__doc__ or "").strip())


def describe(name: str) -> str:
    """One line describing a built-in model."""
    return info(name).summary


def _check_dims(model: str, out_dim: Any, budget: Any, in_dim: Any) -> tuple[int, int, int]:
    checked = []
    for key, value in (("out_dim", out_dim), ("budget", budget), ("in_dim", in_dim)):
        try:
            checked.append(positive_int(value))
        except ValueError as exc:
            raise bad_value(model, key, value, str(exc)) from None
    return checked[0], checked[1], checked[2]


def build(
    name: str,
    *,
    out_dim: int = DEFAULT_OUT_DIM,
    budget: int = DEFAULT_BUDGET,
    in_dim: int = 1,
    **kwargs: Any,
) -> nn.Module:
    """Build model ``name`` mapping ``(x [N, in_dim], edge_index, batch) -> [N, out_dim]``.

    Built-ins get the width whose trainable parameter count is closest to ``budget`` (within
    :data:`TOLERANCE`; attention models may use fewer than 8 heads when 8 cannot get there and ``heads`` was
    not given); ``width=`` skips the search. Other keywords are model options (``layers``, ``dropout``,
    ``heads``, ``deg``...; see :func:`info`). ``name`` with a ``:`` is a user import path.

    Raises :class:`GaptuiError` for an unknown name (with a suggestion), an unknown or invalid option, a
    budget no width can meet, or a user object that breaks the contract.
    """
    obj = MODELS.get(name)
    out_dim, budget, in_dim = _check_dims(name, out_dim, budget, in_dim)
    if ":" in name:
        return _build_user(name, obj, out_dim=out_dim, budget=budget, in_dim=in_dim, **kwargs)
    cls: type[ResidualGNN] = obj
    options = cls.resolve_options(kwargs)
    check_size(cls, options, budget)
    if options["width"] is None:
        explicit = set(kwargs)
        options = choose(cls, out_dim=out_dim, in_dim=in_dim, budget=budget, options=options, explicit=explicit)
    init = {k: v for k, v in options.items() if k != "width"}
    return cls(width=options["width"], out_dim=out_dim, in_dim=in_dim, **init)


def check_size(cls: type[ResidualGNN], options: Mapping[str, Any], budget: int) -> None:
    """Refuse (one line) a depth and width no model can be built with here, before any layer is: more layers than
    the parameter budget holds (the width follows the budget), or, with an explicit width, more parameters than
    this machine can train (each layer holds at least ``width^2``)."""
    from engine.memory import check_layers_fit, check_parameters

    layers, width = int(options["layers"]), options.get("width")
    if width is None:
        check_layers_fit(f"model '{cls.name}'", layers, budget)
    else:
        check_parameters(f"model '{cls.name}'", layers * int(width) ** 2, "lower layers or width")


def check_options(name: str, budget: int = DEFAULT_BUDGET, **kwargs: Any) -> None:
    """What :func:`build` would refuse in ``kwargs`` for built-in model ``name`` (an unknown or invalid option, a
    size no model can have), without building it: the check of a run spec. Import paths are checked by building."""
    if ":" in name:
        return
    cls: type[ResidualGNN] = MODELS.get(name)
    check_size(cls, cls.resolve_options(kwargs), _check_dims(name, DEFAULT_OUT_DIM, budget, 1)[1])


def _build_user(path: str, obj: object, *, out_dim: int, budget: int, in_dim: int, **kwargs: Any) -> nn.Module:
    """Call a user's class or factory and check the result honours the model contract."""
    if not callable(obj):
        raise GaptuiError(f"model '{path}' is a {type(obj).__name__}, not a class or function")
    try:
        model = obj(out_dim=out_dim, budget=budget, in_dim=in_dim, **kwargs)
    except TypeError as exc:
        # Almost always a signature mismatch with the keywords of the contract; say which were passed.
        passed = ", ".join(["out_dim", "budget", "in_dim", *kwargs])
        raise GaptuiError(f"model '{path}' could not be called with keywords ({passed}): {exc}") from exc
    if not isinstance(model, nn.Module):
        raise GaptuiError(f"model '{path}' returned a {type(model).__name__}, expected a torch.nn.Module")
    _smoke_test(path, model, in_dim=in_dim, out_dim=out_dim)
    return model


def _smoke_test(path: str, model: nn.Module, *, in_dim: int, out_dim: int) -> None:
    """Run ``model`` on two tiny graphs (a triangle and an edge) and check the output shape.

    Runs in eval mode with gradients off and the RNG forked, so the check changes neither the model's
    training mode nor a seeded run's random stream.
    """
    # Feed the inputs where the model's weights live (a user factory may move the model to a GPU).
    param = next(iter(model.parameters()), None)
    device = param.device if param is not None else torch.device("cpu")
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.get_default_dtype()
    x = torch.ones(5, in_dim, device=device, dtype=dtype)
    edges = torch.tensor([[0, 1], [1, 2], [0, 2], [3, 4]])
    edge_index = torch.cat([edges, edges.flip(1)]).t().contiguous()  # both directions, [2, 8]
    batch = torch.tensor([0, 0, 0, 1, 1])
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = model(x, edge_index.to(device), batch.to(device))
    except Exception as exc:
        raise GaptuiError(
            f"model '{path}' failed on a 5-node test batch (x [5, {in_dim}], edge_index [2, 8], batch [5]): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (5, out_dim):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise GaptuiError(f"model '{path}' returned {got} for 5 nodes, expected a tensor of shape (5, {out_dim})")
