"""Alignment metrics: LAP optimality, argmax / top-k with ties and padding, node-weighted merging, pools."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from engine.errors import GaptuiError
from engine.evaluation import AlignmentScores, LapEvaluator, evaluate_batch, lap_assignment, pad_batch


def brute_force_max(sim: np.ndarray) -> float:
    n = sim.shape[0]
    return max(sim[np.arange(n), list(p)].sum() for p in itertools.permutations(range(n)))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_lap_reaches_the_brute_force_optimum(n: int) -> None:
    for seed in range(40):
        rng = np.random.default_rng(1000 * n + seed)
        # Half the instances are small integers, so that many optima tie.
        sim = rng.standard_normal((n, n)) if seed % 2 else rng.integers(-2, 3, (n, n)).astype(float)
        pi_hat = lap_assignment(sim)
        assert sorted(pi_hat.tolist()) == list(range(n))
        assert sim[np.arange(n), pi_hat].sum() == pytest.approx(brute_force_max(sim), abs=1e-9)


def test_lap_accuracy_of_the_batch_matches_the_assignment() -> None:
    rng = np.random.default_rng(3)
    sizes = [5, 3, 6, 1]
    sims = [rng.standard_normal((n, n)) for n in sizes]
    perms = [rng.permutation(n) for n in sizes]
    sim, num_nodes, perm = pad_batch(sims, perms)
    scores = evaluate_batch(sim, num_nodes, perm)
    expected = sum(int((lap_assignment(s) == p).sum()) for s, p in zip(sims, perms, strict=True))
    assert scores.lap_correct == expected
    assert scores.num_nodes == sum(sizes) and scores.num_pairs == len(sizes)


def test_perfect_similarity_scores_one() -> None:
    rng = np.random.default_rng(0)
    perm = rng.permutation(7)
    sim = np.zeros((7, 7))
    sim[np.arange(7), perm] = 1.0
    scores = evaluate_batch(sim, [7], perm[None], ks=(1, 3))
    assert (scores.lap_acc, scores.argmax_acc, scores.topk_acc) == (1.0, 1.0, {1: 1.0, 3: 1.0})


def test_argmax_and_topk_on_a_hand_made_matrix_with_ties() -> None:
    # perm = identity; the true entry of each row is on the diagonal.
    sim = np.array(
        [
            [5.0, 1.0, 2.0, 0.0],  # true is the strict max: rank 0
            [3.0, 3.0, 1.0, 0.0],  # true ties with column 0 at the max: rank 1; argmax picks column 0
            [4.0, 4.0, 4.0, 4.0],  # all tied: rank 3
            [9.0, 8.0, 8.0, 8.0],  # column 0 strictly above, 2 ties: rank 3
        ]
    )
    perm = np.arange(4)
    s = evaluate_batch(sim, [4], perm[None], ks=(1, 2, 3, 4))
    # argmax: rows 0 only (row 1 and row 2 tie-break to column 0, row 3's max is column 0).
    assert s.argmax_correct == 1
    # ranks (0, 1, 3, 3): top-1 {row 0}, top-2 {0, 1}, top-3 {0, 1}, top-4 all.
    assert s.topk_correct == {1: 1, 2: 2, 3: 2, 4: 4}
    assert s.topk_acc[1] <= s.argmax_acc


def test_row_of_ties_counts_for_argmax_only_at_the_lowest_column() -> None:
    sim = np.ones((3, 3))
    s = evaluate_batch(sim, [3], np.array([[0, 2, 1]]), ks=(1, 2, 3))
    assert s.argmax_correct == 1  # row 0, true column 0 = numpy's tie winner
    assert s.topk_correct == {1: 0, 2: 0, 3: 3}  # conservative ties: rank 2 everywhere


def test_padding_is_never_matched_nor_ranked() -> None:
    rng = np.random.default_rng(5)
    nmax, sizes = 6, [4, 2, 6]
    sim = np.full((3, nmax, nmax), 1e9)  # padding far above every real score...
    sim[0, 0, :] = np.nan  # ...or NaN / -inf: never read either
    sim[1, :, 5] = -np.inf
    perm = np.full((3, nmax), 99)  # padded targets are junk too
    blocks = []
    for b, n in enumerate(sizes):
        block = rng.standard_normal((n, n))
        p = rng.permutation(n)
        block[np.arange(n), p] += 3.0  # strong diagonal: every metric is perfect on the real block
        sim[b, :n, :n] = block
        perm[b, :n] = p
        blocks.append((block, p))
    sim[0, 0, :4] = blocks[0][0][0]  # restore the real part of row 0
    s = evaluate_batch(sim, sizes, perm, ks=(1, 2))
    assert s.num_nodes == 12
    assert s.lap_correct == s.argmax_correct == s.topk_correct[1] == 12

    # A real row whose true score is the row's lowest real value: padding must not raise its rank.
    sim2 = np.full((1, 4, 4), -1e9)
    sim2[0, :2, :2] = [[1.0, 2.0], [0.0, 5.0]]
    s2 = evaluate_batch(sim2, [2], np.array([[0, 1, -1, -1]]), ks=(1, 2))
    assert s2.argmax_correct == 1 and s2.topk_correct == {1: 1, 2: 2}
    assert s2.lap_correct == 2  # the only alternative matching scores 2 + 0 < 1 + 5


def test_merge_is_node_weighted() -> None:
    a = AlignmentScores(num_pairs=1, num_nodes=2, lap_correct=2, argmax_correct=2, topk_correct={1: 2})
    b = AlignmentScores(num_pairs=1, num_nodes=8, lap_correct=0, argmax_correct=4, topk_correct={1: 0})
    m = a + b
    assert m.lap_acc == pytest.approx(0.2)  # not the mean of per-pair accuracies (0.5)
    assert m.argmax_acc == pytest.approx(0.6)
    assert m.topk_acc == {1: pytest.approx(0.2)}
    assert (m.num_pairs, m.num_nodes) == (2, 10)
    assert AlignmentScores.total([]) == AlignmentScores()
    assert AlignmentScores() + a == a
    with pytest.raises(ValueError, match="cut-offs"):
        a.merge(AlignmentScores(num_pairs=1, num_nodes=1, topk_correct={5: 1}))


def test_batch_scores_equal_the_merge_of_single_pairs() -> None:
    rng = np.random.default_rng(11)
    sizes = [3, 9, 5, 7]
    sims = [rng.standard_normal((n, n)) + 2 * np.eye(n) for n in sizes]
    perms = [np.arange(n) for n in sizes]
    whole = evaluate_batch(*pad_batch(sims, perms))
    singles = AlignmentScores.total(evaluate_batch(s, [len(p)], [p]) for s, p in zip(sims, perms, strict=True))
    assert whole == singles
    assert whole.to_dict()["lap_acc"] == whole.lap_acc


def test_torch_input_matches_numpy() -> None:
    rng = np.random.default_rng(2)
    sim, n, perm = pad_batch([rng.standard_normal((k, k)) for k in (4, 6)], [rng.permutation(k) for k in (4, 6)])
    ref = evaluate_batch(sim.astype(np.float32), n, perm)
    t = torch.tensor(sim, dtype=torch.float32, requires_grad=True)
    assert evaluate_batch(t, torch.tensor(n), torch.tensor(perm)) == ref


def test_bad_inputs_are_refused() -> None:
    sim = np.zeros((1, 3, 3))
    with pytest.raises(ValueError, match="not a permutation"):
        evaluate_batch(sim, [3], np.array([[0, 0, 1]]))
    with pytest.raises(ValueError, match="num_nodes"):
        evaluate_batch(sim, [4], np.array([[0, 1, 2]]))
    sim[0, 1, 2] = np.nan
    with pytest.raises(GaptuiError, match="non-finite"):
        evaluate_batch(sim, [3], np.array([[0, 1, 2]]))
    with pytest.raises(ValueError):
        lap_assignment(np.zeros((2, 3)))


def random_batch(seed: int, count: int = 40, nmax: int = 30) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, nmax + 1, count)
    sims = [rng.standard_normal((n, n)) + rng.uniform(0, 3) * np.eye(n)[:, rng.permutation(n)] for n in sizes]
    perms = [rng.permutation(n) for n in sizes]
    return pad_batch(sims, perms)


@pytest.mark.parametrize("kind", ["thread", "process", "serial"])
def test_pooled_evaluators_equal_serial(kind: str) -> None:
    batches = [random_batch(seed) for seed in range(3)]
    serial = [evaluate_batch(*b) for b in batches]
    with LapEvaluator(kind, workers=2) as ev:
        futures = [ev.submit(*b) for b in batches]
        assert [f.result() for f in futures] == serial
        assert ev.result() == AlignmentScores.total(serial)
        assert ev.result() == AlignmentScores()  # result() drains what was submitted
        assert ev.evaluate(*batches[0]) == serial[0]
        assert ev.result() == AlignmentScores()  # evaluate() is not accumulated


def test_submit_copies_the_batch_and_executor_form_matches() -> None:
    sim, n, perm = random_batch(7)
    ref = evaluate_batch(sim, n, perm)
    with LapEvaluator("thread", workers=2) as ev:
        ev.submit(sim, n, perm)
        sim[:] = 0.0  # the training loop reuses its buffer at once
        assert ev.result() == ref
    sim, n, perm = random_batch(7)
    with ThreadPoolExecutor(2) as pool:
        assert evaluate_batch(sim, n, perm, executor=pool) == ref


def test_submit_raises_validation_errors_at_once() -> None:
    with LapEvaluator("thread", workers=1) as ev, pytest.raises(GaptuiError):
        ev.submit(np.full((1, 2, 2), np.inf), [2], np.array([[0, 1]]))
