"""Edge reconstruction: can a linear read-out of node embeddings tell which pairs of nodes are joined by an edge?

A logistic probe is trained on node pairs of some graphs and tested on node pairs of other graphs. A node pair
``(i, j)`` is described by the symmetric features ``[x_i * x_j, |x_i - x_j|]`` (``2d`` numbers for embeddings of
width ``d``, each standardised on the training pairs), so the probe cannot depend on the order of ``i`` and ``j``
and sees both the agreement and the distance of the two embeddings.

Pairs are drawn uniformly among the ``n (n - 1) / 2`` node pairs of each graph (every pair when there are at most
``node_pairs`` of them), so the test pairs keep the class balance of the graphs: on sparse graphs most pairs are
not edges, and the share of the more common class (the *majority baseline*) is what a probe that learned nothing
scores. The probe is fitted by maximum likelihood (L-BFGS, a small L2 penalty), so its probabilities are
calibrated: *accuracy* cuts them at 0.5, *balanced accuracy* (the mean of the true positive and true negative
rates) cuts them at the training pairs' edge rate, the cut that weighs both classes alike, and the *AUC* needs no
cut at all (the chance that an edge scores above a non-edge, ties counted half).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

#: L2 penalty on the probe's weights (not its bias), per training pair.
L2 = 1e-4
#: L-BFGS iterations of the fit (full batch; the loss is convex, so it converges well before on most layers).
MAX_ITER = 200


@dataclass(frozen=True)
class EdgeSample:
    """Node pairs of a set of graphs: ``left`` / ``right`` row indices into the stacked node states of those
    graphs and ``label`` (1.0: an edge, 0.0: not)."""

    left: np.ndarray
    right: np.ndarray
    label: np.ndarray

    def __len__(self) -> int:
        return int(self.label.size)


def sample_node_pairs(
    num_nodes: np.ndarray, edges: list[np.ndarray], node_pairs: int, rng: np.random.Generator
) -> EdgeSample:
    """Up to ``node_pairs`` node pairs ``i < j`` per graph, drawn uniformly without replacement (all of them when
    the graph has no more). ``num_nodes [G]``; ``edges[g]`` is graph ``g``'s ``[E, 2]`` edge list (``i < j``,
    local ids); rows of the result index the graphs' nodes stacked in order."""
    offsets = np.concatenate([[0], np.cumsum(num_nodes)]).astype(np.int64)
    lefts, rights, labels = [], [], []
    for g, n in enumerate(num_nodes.tolist()):
        rows, cols = np.triu_indices(n, 1)
        if rows.size > node_pairs:
            pick = np.sort(rng.choice(rows.size, size=node_pairs, replace=False))
            rows, cols = rows[pick], cols[pick]
        keys = rows.astype(np.int64) * n + cols
        edge_keys = edges[g][:, 0].astype(np.int64) * n + edges[g][:, 1]
        labels.append(np.isin(keys, edge_keys).astype(np.float32))
        lefts.append(rows + offsets[g])
        rights.append(cols + offsets[g])
    if not labels:
        empty = np.zeros(0, dtype=np.int64)
        return EdgeSample(empty, empty, np.zeros(0, dtype=np.float32))
    return EdgeSample(np.concatenate(lefts), np.concatenate(rights), np.concatenate(labels))


def pair_features(states: torch.Tensor, sample: EdgeSample) -> torch.Tensor:
    """``[len(sample), 2d]``: ``x_i * x_j`` and ``|x_i - x_j|`` of each pair, from node states ``[N, d]``."""
    left = states[torch.as_tensor(sample.left)]
    right = states[torch.as_tensor(sample.right)]
    return torch.cat([left * right, (left - right).abs()], dim=1)


@dataclass(frozen=True)
class EdgeScores:
    """What the probe scores on the test pairs (shares in [0, 1]; ``nan`` where a class is missing)."""

    accuracy: float
    balanced_accuracy: float
    auc: float
    #: Accuracy of always answering the training pairs' more common class.
    majority: float
    #: Share of the test pairs that are edges.
    edge_rate: float
    train_pairs: int
    test_pairs: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def fit_edge_probe(train_x: torch.Tensor, train_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A logistic probe on standardised features: ``(mean, scale, weights [2d + 1])`` (the last weight is the
    bias). Deterministic on a CPU: full-batch L-BFGS from zero weights."""
    mean = train_x.mean(0)
    scale = train_x.std(0).clamp_min(1e-6)
    x = (train_x - mean) / scale
    w = torch.zeros(x.shape[1] + 1, dtype=x.dtype, requires_grad=True)
    opt = torch.optim.LBFGS([w], lr=1.0, max_iter=MAX_ITER, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = x @ w[:-1] + w[-1]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, train_y) + L2 * (w[:-1] ** 2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    return mean, scale, w.detach()


def edge_probe(
    train_states: torch.Tensor, train: EdgeSample, test_states: torch.Tensor, test: EdgeSample
) -> EdgeScores:
    """Fit the probe on ``train`` pairs of ``train_states`` ``[N, d]``, score it on ``test`` pairs of
    ``test_states`` (the node states of other graphs, from the same layer)."""
    train_x = pair_features(train_states.float(), train)
    train_y = torch.as_tensor(train.label)
    mean, scale, w = fit_edge_probe(train_x, train_y)
    del train_x
    test_x = (pair_features(test_states.float(), test) - mean) / scale
    prob = torch.sigmoid(test_x @ w[:-1] + w[-1]).numpy()
    label = test.label.astype(bool)
    prior = float(train.label.mean()) if len(train) else 0.5
    majority_class = prior > 0.5
    return EdgeScores(
        accuracy=float(np.mean((prob > 0.5) == label)) if label.size else float("nan"),
        balanced_accuracy=balanced_accuracy(prob > prior, label),
        auc=roc_auc(prob, label),
        majority=float(np.mean(label == majority_class)) if label.size else float("nan"),
        edge_rate=float(label.mean()) if label.size else float("nan"),
        train_pairs=len(train),
        test_pairs=len(test),
    )


def balanced_accuracy(predicted: np.ndarray, label: np.ndarray) -> float:
    """Mean of the true positive and true negative rates; ``nan`` unless both classes occur."""
    if label.all() or not label.any():
        return float("nan")
    return float((predicted[label].mean() + (~predicted[~label]).mean()) / 2)


def roc_auc(score: np.ndarray, label: np.ndarray) -> float:
    """Area under the ROC curve from the ranks of the scores (Mann-Whitney U; ties count half); ``nan`` unless
    both classes occur."""
    from scipy.stats import rankdata

    positives = int(label.sum())
    negatives = int(label.size - positives)
    if not positives or not negatives:
        return float("nan")
    ranks = rankdata(score)
    return float((ranks[label].sum() - positives * (positives + 1) / 2) / (positives * negatives))
