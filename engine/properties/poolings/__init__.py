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
