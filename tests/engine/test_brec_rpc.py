"""RPC: the relabelled copies, Hotelling's T^2 and its threshold, the verdict rules, and one trained run on the shared
loop (resumed in the middle of a pair, it ends with the verdicts of the run that was never stopped)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.brec.data import load_pairs
from engine.brec.rpc import Comparison, hotelling_threshold, pair_copies, relabellings, t_squared
from engine.brec.spec import BrecSpec
from engine.errors import GaptuiError
from engine.tasks.run import Cancelled, RunContext, run_steps


def test_the_threshold_is_hotellings_quantile_brec_hard_codes() -> None:
    assert hotelling_threshold(32, 16, 0.05) == pytest.approx(72.34, abs=0.01)
    assert hotelling_threshold(64, 16, 0.05) < hotelling_threshold(32, 16, 0.05)
    with pytest.raises(GaptuiError, match="needs more relabellings than dimensions"):
        hotelling_threshold(16, 16, 0.05)


def test_t_squared_reads_a_consistent_difference_and_not_noise() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(32, 16, generator=gen)
    assert t_squared(x, x.clone()) == 0.0  # equal embeddings: no difference, no covariance
    noise = x + 1e-3 * torch.randn(32, 16, generator=gen)
    shifted = noise + 3e-3  # three standard deviations of the noise in each of 16 dimensions
    assert t_squared(x, noise) < 72.34 < t_squared(x, shifted)
    assert t_squared(x, shifted, "hotelling") == pytest.approx(32 * t_squared(x, shifted), rel=1e-5)


def test_a_pair_counts_only_when_its_reliability_check_passes() -> None:
    assert Comparison(500.0, 3.0, 72.34).distinguished
    assert not Comparison(50.0, 3.0, 72.34).distinguished
    unreliable = Comparison(500.0, 90.0, 72.34)
    assert unreliable.separated and not unreliable.reliable and not unreliable.distinguished
    assert not Comparison(100.0, 100.0000001, 72.34).separated  # as close as BREC's isclose: no verdict


def test_relabellings_are_distinct_start_with_the_graph_and_depend_on_the_data_seed_only() -> None:
    pair = load_pairs("basic", limit=1)[0]
    copies = relabellings(pair.g, 32, np.random.default_rng(0))
    keys = {tuple(sorted(map(tuple, np.sort(c.edge_index.T, axis=1).tolist()))) for c in copies}
    assert len(copies) == len(keys) == 32
    first = {tuple(e) for e in copies[0].edge_index.T.tolist()}
    assert first == {*map(tuple, pair.g.edges.tolist()), *map(tuple, pair.g.edges[:, ::-1].tolist())}
    a, b = pair_copies(pair.g, pair.h, 8, 0, pair.id), pair_copies(pair.g, pair.h, 8, 0, pair.id)
    assert all(np.array_equal(x.edge_index, y.edge_index) for x, y in zip(a.train, b.train, strict=True))
    other = pair_copies(pair.g, pair.h, 8, 1, pair.id)
    assert not all(np.array_equal(x.edge_index, y.edge_index) for x, y in zip(a.train, other.train, strict=True))
    assert len(a.train) == len(a.reliability) == 16 and a.which in (0, 1)


def _spec(**changes: object) -> BrecSpec:
    raw = {"model": "gin", "category": "basic", "pairs": 2, "epochs": 3, "budget": 8000, "relabellings": 20,
           "batch_size": 8, "device": "cpu", **changes}  # fmt: skip
    return BrecSpec.from_dict(raw)


def _run(spec: BrecSpec, out: Path, stop_after: int | None = None):
    from engine.brec.training import PairTraining
    from engine.loop import epoch_steps

    calls = {"n": 0}

    def should_stop() -> bool:
        calls["n"] += 1
        return stop_after is not None and calls["n"] > stop_after

    ctx = RunContext(out, emit=lambda event, **kw: None, log=lambda line: None, should_stop=should_stop)
    task = PairTraining(spec, load_pairs(spec.category, limit=spec.pairs), torch.device("cpu"))
    result = run_steps(epoch_steps(task, ctx, spec.hash(), spec.run_options()))
    return task, result


def test_a_run_resumed_in_the_middle_of_a_pair_ends_as_the_run_never_stopped(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    spec = _spec()
    whole, result = _run(spec, tmp_path / "whole")
    assert result.metrics["pairs"] == 2 and result.metrics["distinguished"] == 0  # gin is bounded by 1-WL
    assert [r["passes"] for r in whole.results] == [3, 3]  # the loss of a 1-WL-bounded model never drops
    with pytest.raises(Cancelled):
        _run(spec, tmp_path / "cut", stop_after=10)  # in the second pass over the first pair's copies
    resumed, again = _run(spec, tmp_path / "cut")
    assert [(r["id"], r["t2"], r["reliability_t2"]) for r in resumed.results] == [
        (r["id"], r["t2"], r["reliability_t2"]) for r in whole.results
    ]
    assert again.metrics == result.metrics
    assert all(math.isfinite(r["t2"]) for r in whole.results)


def test_positional_inputs_beyond_1wl_tell_basic_pairs_apart(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    task, result = _run(_spec(model="gcn", features="degree+rwpe:8", pairs=1, epochs=1), tmp_path / "rw")
    assert result.metrics["distinguished"] == 1 and result.metrics["reliability_failures"] == 0
    assert task.results[0]["t2"] > task.threshold > task.results[0]["reliability_t2"]
