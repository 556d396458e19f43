"""The training fast path: sparse-matrix aggregation and dense norms equal PyG's layers; torch.compile is a run
option whose metrics equal the eager run's."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine import models, worker
from engine.memory import ENV_MALLOC
from engine.models.sparse import Graph
from engine.spec import RunSpec
from engine.training import wants_compile
from tests.test_models import random_graph

#: (model, options): every built-in layer the fast path handles, plus the paper package's settings.
CASES = [(name, {}) for name in models.names()] + [
    (name, {"input_layer": "conv", "norm": "whole-batch"}) for name in ("gcn", "gin", "ggnn", "gat", "gatv2")
]
CASES.append(("ggnn", {"steps": 2}))


def equal_size_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three graphs of 8 nodes in order: the dense per-graph norm applies."""
    edges = [random_graph(8, 0.4, seed) + 8 * i for i, seed in enumerate((1, 2, 3))]
    return torch.cat(edges, dim=1), torch.arange(3).repeat_interleave(8)


def ragged_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Graphs of 9 and 7 nodes, a self-loop and one edge in a single direction: PyG's norm, general matrices."""
    first, second = random_graph(9, 0.4, 4), random_graph(7, 0.5, 5) + 9
    extra = torch.tensor([[3, 10], [3, 12]])  # self-loop on 3, directed edge 10 -> 12
    return torch.cat([first, second, extra], dim=1), torch.cat([torch.zeros(9), torch.ones(7)]).long()


def outputs_and_grads(name: str, options: dict, sparse: bool, batch_of) -> tuple[torch.Tensor, list[torch.Tensor]]:
    edge_index, batch = batch_of()
    x = torch.randn(batch.shape[0], 2, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = models.build(name, out_dim=16, in_dim=2, width=16, sparse=sparse, **options)
    y = model(x, edge_index, batch)
    y.pow(2).sum().backward()
    return y.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize(("name", "options"), CASES, ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in CASES])
@pytest.mark.parametrize("batch_of", [equal_size_batch, ragged_batch], ids=["equal", "ragged"])
def test_fast_path_equals_pyg_layers(name: str, options: dict, batch_of) -> None:
    y_fast, g_fast = outputs_and_grads(name, options, True, batch_of)
    y_pyg, g_pyg = outputs_and_grads(name, options, False, batch_of)
    assert torch.allclose(y_fast, y_pyg, rtol=1e-4, atol=1e-5 * float(y_pyg.abs().max()))
    # Gradients that are zero in exact arithmetic (a bias before GraphNorm's mean subtraction) are rounding noise
    # on both sides: compare every gradient at the scale of the largest one.
    scale = max(float(g.abs().max()) for g in g_pyg)
    assert len(g_fast) == len(g_pyg)
    for fast, pyg in zip(g_fast, g_pyg, strict=True):
        assert float((fast - pyg).abs().max()) <= 1e-4 * scale


def test_dense_norm_only_for_equal_graphs_in_order() -> None:
    edge_index, batch = equal_size_batch()
    assert Graph(edge_index, batch, 24).graph_size == 8
    assert Graph(edge_index, batch[torch.randperm(24)], 24).graph_size is None  # same sizes, not in order
    edge_index, batch = ragged_batch()
    assert Graph(edge_index, batch, 16).graph_size is None
    assert Graph(edge_index, None, 16).graph_size == 16  # one graph


def test_auto_compiles_long_cpu_runs_only() -> None:
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert wants_compile("auto", cpu, 15_000, "gcn", 1) and not wants_compile("auto", cpu, 40, "gcn", 1)
    assert not wants_compile("auto", gpu, 15_000, "gcn", 1)  # opt-in on a GPU
    assert not wants_compile("auto", cpu, 15_000, "mypkg.models:Net", 1)  # only built-ins are known to compile
    assert wants_compile("on", cpu, 1, "mypkg.models:Net") and not wants_compile("off", cpu, 15_000, "gcn", 1)


def test_auto_compiles_threaded_cpu_runs_only_where_it_pays() -> None:
    cpu = torch.device("cpu")
    assert not wants_compile("auto", cpu, 15_000, "gcn", 2)  # eager sparse products use the threads better
    assert wants_compile("auto", cpu, 15_000, "gatv2", 2) and wants_compile("auto", cpu, 15_000, "gatedgcn", 4)
    assert wants_compile("on", cpu, 15_000, "gcn", 2)


def test_compile_is_hashed_only_when_set() -> None:
    base = {"dataset": {"base": "er", "noise": 0.1}, "model": "gcn"}
    plain = RunSpec.from_dict(base, where="test")
    assert plain.hash() == RunSpec.from_dict({**base, "compile": "auto"}, where="test").hash()
    assert plain.hash() != RunSpec.from_dict({**base, "compile": "off"}, where="test").hash()


def _train(tmp_path: Path, mode: str) -> dict:
    spec = RunSpec.from_dict(
        {
            "dataset": {"base": "er", "noise": 0.1, "n_train": 12, "n_val": 6, "params": {"n": 16, "degree": 4}},
            "model": "gin",
            "budget": 6_000,
            "epochs": 2,
            "batch_size": 6,
            "compile": mode,
            "device": "cpu",
            "datasets_dir": str(tmp_path / "datasets"),
        },
        where="test",
    )
    out = tmp_path / mode
    out.mkdir()
    (out / "spec.json").write_text(json.dumps(spec.to_dict()))
    assert worker.main(["--spec", str(out / "spec.json"), "--out", str(out), "--quiet"]) == 0
    return json.loads((out / "result.json").read_text())


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")), reason="torch.compile needs a C++ compiler")
def test_compile_on_and_off_give_the_same_metrics(tmp_path: Path) -> None:
    eager, compiled = _train(tmp_path, "off"), _train(tmp_path, "on")
    assert (eager["compiled"], compiled["compiled"]) == (False, True)
    for key in ("val_loss", "train_loss"):
        assert compiled["metrics"][key] == pytest.approx(eager["metrics"][key], rel=1e-4)
    assert compiled["metrics"]["val_lap_acc"] == pytest.approx(eager["metrics"]["val_lap_acc"], abs=0.02)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_allocator_tuning_is_set_in_a_fresh_process_and_can_be_turned_off() -> None:
    code = (
        "import torch\nfrom engine.memory import tune_allocator\nok = tune_allocator()\n"
        "for _ in range(3):\n    x = torch.ones(20_000_000)\n    assert float(x.sum()) == 2e7\n    del x\n"
        "print(ok)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(ENV_MALLOC, None)
    tuned = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    env[ENV_MALLOC] = "default"
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert (tuned.stdout.strip(), plain.stdout.strip()) == ("True", "False")
