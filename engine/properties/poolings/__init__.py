"""Global poolings for the property suite: name -> factory ``(channels) -> module``.

A pooling is called as ``pool(x, index, dim_size=B)`` with node features ``x`` ``[N, channels]`` and the graph
of each node ``index`` ``[N]`` (sorted), and returns ``[B, out]``; ``out`` is found by :func:`output_dim`. A
user's own pooling plugs in by import path, ``"my_module:my_factory"``, called with ``channels``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch_geometric.nn import MLP, aggr

from engine.properties.poolings.hybrid import HybridPooling
from engine.properties.poolings.sopool_attentional import SoPoolAttentional
from engine.properties.poolings.sopool_bimap import SoPoolBiMap
from engine.registry import Registry

PoolingFactory = Callable[[int], nn.Module]
POOLINGS: Registry[PoolingFactory] = Registry("pooling")


@POOLINGS.register("mean")
def mean(channels: int) -> nn.Module:
    return aggr.MeanAggregation()


@POOLINGS.register("sum")
def sum_(channels: int) -> nn.Module:
    return aggr.SumAggregation()


@POOLINGS.register("deepsets")
def deepsets(channels: int) -> nn.Module:
    """rho(sum_i phi(h_i)) with two-layer MLPs phi and rho."""
    return aggr.DeepSetsAggregation(
        local_nn=MLP([channels, channels, channels], norm=None),
        global_nn=MLP([channels, channels, channels], norm=None),
    )


@POOLINGS.register("set2set")
def set2set(channels: int) -> nn.Module:
    """Three LSTM read-out steps; output 2 * channels."""
    return aggr.Set2Set(channels, processing_steps=3)


@POOLINGS.register("attention")
def attention(channels: int) -> nn.Module:
    """Soft attention: softmax gate over nodes from an MLP, applied to MLP-transformed features."""
    return aggr.AttentionalAggregation(
        gate_nn=MLP([channels, channels, 1], norm=None), nn=MLP([channels, channels, channels], norm=None)
    )


@POOLINGS.register("set_transformer")
def set_transformer(channels: int) -> nn.Module:
    """One encoder and one decoder block, one seed point, 4 heads."""
    return aggr.SetTransformerAggregation(channels, num_seed_points=1, heads=4, layer_norm=True)


@POOLINGS.register("gmt")
def gmt(channels: int) -> nn.Module:
    """Graph Multiset Transformer, 4 seed points, 4 heads."""
    return aggr.GraphMultisetTransformer(channels, k=4, heads=4, layer_norm=True)


@POOLINGS.register("sopool_bimap")
def sopool_bimap(channels: int) -> nn.Module:
    return SoPoolBiMap(channels, reduced=max(1, channels // 4))


@POOLINGS.register("sopool_attentional")
def sopool_attentional(channels: int) -> nn.Module:
    return SoPoolAttentional(channels)


@POOLINGS.register("hybrid")
def hybrid(channels: int) -> nn.Module:
    """0.6 x soft attention + 0.4 x SoPool-Attentional (the property benchmark, section 4.3); the weight fixed."""
    return HybridPooling(attention(channels), sopool_attentional(channels), weight=0.6, learn=False)


@POOLINGS.register("hybrid_learned")
def hybrid_learned(channels: int) -> nn.Module:
    """As ``hybrid``, the weight learned: ``a = sigmoid(w)``, ``w`` starting where ``a = 0.6``."""
    return HybridPooling(attention(channels), sopool_attentional(channels), weight=0.6, learn=True)


def build_pooling(name: str, channels: int) -> tuple[nn.Module, int]:
    """The pooling called ``name`` (or ``module:factory``) for ``channels`` inputs, and its output width."""
    factory = POOLINGS.get(name)
    module = factory(channels)
    if not isinstance(module, nn.Module):
        from engine.errors import GaptuiError

        raise GaptuiError(f"pooling '{name}': the factory returned {type(module).__name__}, expected a torch module")
    return module, output_dim(module, channels)


def output_dim(module: nn.Module, channels: int) -> int:
    """Width of the pooled vector, from one forward pass on two tiny graphs (RNG state left untouched)."""
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        x = torch.zeros(3, channels)
        out = module(x, torch.tensor([0, 0, 1]), dim_size=2)
    return int(out.shape[-1])


#: Import-path poolings already tried at planning: (name, channels).
_CHECKED: set[tuple[str, int]] = set()


def check_pooling(name: str, channels: int) -> None:
    """Try a pooling named by import path once, before any run uses it: the module imports, the attribute exists,
    the factory builds a module for ``channels`` inputs, and the module returns ``[2, width]`` for two tiny graphs.
    GaptuiError names the path and the step that failed."""
    from engine.errors import GaptuiError

    if ":" not in name or (name, channels) in _CHECKED:
        return
    here = f"pooling '{name}'"
    try:
        factory = POOLINGS.get(name)
    except GaptuiError as exc:
        raise GaptuiError(f"{here}: {exc}") from None
    if not callable(factory):
        raise GaptuiError(f"{here}: {type(factory).__name__} is not callable; expected a factory (channels) -> module")
    try:
        module = factory(channels)
    except Exception as exc:  # noqa: BLE001 - the user's code: any failure is reported in one line
        raise GaptuiError(f"{here}: the factory fails for {channels} channels: {type(exc).__name__}: {exc}") from None
    if not isinstance(module, nn.Module):
        raise GaptuiError(f"{here}: the factory returned {type(module).__name__}, expected a torch module")
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = module(torch.zeros(3, channels), torch.tensor([0, 0, 1]), dim_size=2)
    except Exception as exc:  # noqa: BLE001 - the user's code
        raise GaptuiError(
            f"{here}: its module fails on two tiny graphs (x [3, {channels}], index [0, 0, 1], dim_size=2): "
            f"{type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 2 or out.shape[1] < 1:
        got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise GaptuiError(f"{here}: its module returned {got} for 2 graphs; expected [2, width] (B graphs x width)")
    _CHECKED.add((name, channels))
