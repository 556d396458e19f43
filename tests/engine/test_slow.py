"""Slow checks at paper scale, excluded by default: run with ``python -m pytest -m slow``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.alignment.datasets import DatasetSpec, build_dataset

pytestmark = pytest.mark.slow


def test_paper_sized_er_dataset_statistics(tmp_path: Path) -> None:
    ds, built = build_dataset(DatasetSpec("er", 0.12), tmp_path)
    assert built and ds.stats["train"]["pairs"] == 5000 and ds.stats["val"]["pairs"] == 500
    train = ds.stats["train"]
    # About 2 million edges: the binomial standard deviation of each fraction is ~0.0002.
    assert train["removed_fraction"] == pytest.approx(0.12, abs=0.002)
    assert train["added_fraction"] == pytest.approx(0.12, abs=0.002)
    assert train["mean_degree"] == pytest.approx(8.0, abs=0.05)
    assert train["mean_degree_h"] == pytest.approx(8.0, abs=0.05)
    split = ds.split("train")
    assert all(not np.array_equal(split.pair(p)[3], np.arange(100)) for p in range(50))


def test_training_on_er_learns_well_beyond_the_untrained_model(tmp_path: Path) -> None:
    import torch

    from engine import models
    from engine.alignment.training import PairTensors, evaluate, train_epoch
    from engine.evaluation import LapEvaluator
    from engine.loop import TrainState, make_optimiser

    ds, _ = build_dataset(DatasetSpec("er", 0.04, n_train=1000, n_val=200, params={"n": 50, "degree": 6}), tmp_path)
    train, val = PairTensors(ds.split("train")), PairTensors(ds.split("val"))
    torch.manual_seed(0)
    model = models.build("gatedgcn", out_dim=64, budget=60_000, in_dim=2)
    epochs = 15
    opt, sched = make_optimiser(model, 3e-3, 0.01, epochs * 10, 30)
    state = TrainState()
    with LapEvaluator() as ev:
        before, _ = evaluate(model, val, 100, ev)
        for _ in range(epochs):
            train_epoch(model, train, opt, sched, state, batch_size=100, seed=0, clip=0.1, clip_mode="value")
            state.epoch, state.batch_in_epoch = state.epoch + 1, 0
        after, _ = evaluate(model, val, 100, ev)
    assert after.lap_acc > 0.9 and after.lap_acc > before.lap_acc + 0.15
