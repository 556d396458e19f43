"""PyG's ``GraphNorm`` per graph on the fast path (:func:`graph_norm`).

When the graphs of a batch all have the same number of nodes and lie in order (alignment pairs of a fixed-order
base, BFS samples), the per-graph statistics are a mean over one axis of a ``[graphs, nodes, width]`` view instead
of two scatters and two gathers, with the gradient written out (:class:`DenseGraphNorm`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch_geometric.nn import GraphNorm

from engine.models.sparse import Graph
from engine.models.sparse_autograd import matrix_dtype


def graph_norm(norm: GraphNorm, x: Tensor, graph: Graph) -> Tensor:
    """PyG's ``GraphNorm(x, batch)``, over a ``[graphs, nodes, width]`` view when the graphs allow it."""
    n = graph.graph_size
    if n is None:
        return norm(x, graph.batch)
    h = x.view(-1, n, x.shape[-1])
    return DenseGraphNorm.apply(h, norm.weight, norm.bias, norm.mean_scale, norm.eps).view_as(x)


def node_sum(x: Tensor) -> Tensor:
    """``x [G, n, C]`` summed over the nodes, ``[G, 1, C]``, in fp32 or ``x``'s wider dtype. A bf16 sum accumulates
    in fp32 and is rounded once, at the end; ``sum(dtype=float32)`` would first copy all of ``x`` to fp32."""
    return x.sum(1, keepdim=True).to(matrix_dtype(x.dtype))


class DenseGraphNorm(torch.autograd.Function):
    r"""GraphNorm over ``h [graphs, nodes, width]`` with its gradient written out, so that a pass over the nodes is
    made only where one is needed (4 forward, 4 backward; autograd's own takes twice as many) and the node-sized
    tensors stay in ``h``'s dtype (bf16 under autocast), the per-graph statistics in fp32 (or ``h``'s, if wider):

    .. math::
        \mu = \operatorname{mean}_n h, \quad o = h - \alpha \mu, \quad r = (\operatorname{mean}_n o^2 +
        \epsilon)^{-1/2}, \quad y = o \, w r + b.
    """

    @staticmethod
    def forward(ctx: Any, h: Tensor, weight: Tensor, bias: Tensor, alpha: Tensor, eps: float) -> Tensor:
        mean = node_sum(h).div_(h.shape[1])  # [G, 1, C]
        out = h - (alpha * mean).to(h.dtype)
        square = node_sum(torch.square(out)).div_(h.shape[1])
        rstd = torch.rsqrt(square + eps)
        scale = weight * rstd
        ctx.save_for_backward(out, mean, rstd, weight, alpha)
        return torch.addcmul(bias.to(h.dtype), out, scale.to(h.dtype))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, None]:
        out, mean, rstd, weight, alpha = ctx.saved_tensors
        n = out.shape[1]
        grad_sum = node_sum(grad)  # B = sum_n dy
        grad_out_sum = node_sum(grad * out)  # A = sum_n dy * o
        scale = weight * rstd
        k = weight * grad_out_sum * rstd.pow(3) / n  # d/do through r: -k o
        # sum_n of d/do, with sum_n o = n (1 - alpha) mean: what the mean subtraction takes back
        go_sum = scale * grad_sum - k * (n * (1 - alpha) * mean)
        grad_h = torch.addcmul((-alpha * go_sum / n).to(grad.dtype), grad, scale.to(grad.dtype))
        grad_h.addcmul_(out, (-k).to(grad.dtype))
        grad_weight = (grad_out_sum * rstd).sum((0, 1))
        grad_bias = grad_sum.sum((0, 1))
        grad_alpha = -(go_sum * mean).sum((0, 1))
        return grad_h, grad_weight, grad_bias, grad_alpha, None
