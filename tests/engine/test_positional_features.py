"""Positional node inputs of the alignment task (engine.alignment.features): parsing, values against PyG, the
per-graph rule, equivariance, sign flips, the cache, training, GAPE embeddings and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from engine import models
from engine.alignment import features as feat
from engine.alignment.datasets import Dataset, DatasetSpec, build_dataset
from engine.alignment.features import (
    Part,
    dataset_positional,
    pair_positional,
    parse_features,
    positional_parts,
    sign_flips,
)
from engine.alignment.noise import correlate
from engine.alignment.spec import RunSpec
from engine.alignment.training import PairTensors, compile_model, evaluate, similarity, train_epoch
from engine.errors import GaptuiError
from engine.evaluation import LapEvaluator
from engine.graphs import Graph
from engine.loop import TrainState, make_optimiser
from engine.pairs import PairSplit
from engine.sources.synthetic import bernoulli_graphs
from tests.support.cli import run_cli


def _pairs(count: int = 8, n: int = 16, seed: int = 0, eta: float = 0.1) -> PairSplit:
    rng = np.random.default_rng(seed)
    return correlate(bernoulli_graphs(n, 5 / (n - 1), count, rng), "add_remove", eta, rng)[0]


def _one(parts: list[Part], n: int, edge_index: np.ndarray) -> list[np.ndarray]:
    return positional_parts(parts, np.array([n]), edge_index, np.array([0, edge_index.shape[1]]))


def _both_ways(edges: list[tuple[int, int]]) -> np.ndarray:
    return Graph(0, np.array(edges, dtype=np.int64)).edge_index()


# ---------------------------------------------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize(
    ("text", "canonical", "dim", "flipped"),
    [
        ("degree", "degree", 2, 0),
        ("ones", "ones", 1, 0),
        ("rwpe:16", "rwpe:16", 16, 0),
        ("degree+rwpe:16", "degree+rwpe:16", 18, 0),
        ("ones+lap:8", "ones+lap:8", 9, 8),
        ("RWPE:4 + degree", "degree+rwpe:4", 6, 0),
        ("lap:3+rwpe:5+ones", "ones+lap:3+rwpe:5", 9, 3),
    ],
)
def test_good_values_parse_to_a_canonical_form_and_width(text: str, canonical: str, dim: int, flipped: int) -> None:
    f = parse_features(text)
    assert (f.text, f.dim, int(f.flipped.sum())) == (canonical, dim, flipped)
    assert parse_features(f.text) == f


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bogus:3", "unknown kind 'bogus'"),
        ("rwp:4", "(did you mean 'rwpe'?)"),
        ("rwpe:x", "K 'x' of 'rwpe' is not a whole number"),
        ("rwpe", "'rwpe' needs its K"),
        ("lap:", "'lap' needs its K"),
        ("lap:0", "K = 0 of 'lap' is not in 1..64"),
        ("rwpe:65", "K = 65 of 'rwpe' is not in 1..64"),
        ("rwpe:4+rwpe:8", "'rwpe' appears twice"),
        ("degree++lap:2", "an empty part"),
        ("", "empty"),
        ("degree+ones", "'degree' and 'ones' together"),
        ("degree:2", "'degree' takes no :K"),
    ],
)
def test_bad_values_raise_one_line_naming_the_value(text: str, expected: str) -> None:
    with pytest.raises(GaptuiError) as err:
        parse_features(text, "here")
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"here: features '{text}': ") and expected in message
    assert "expected degree, ones, rwpe:K or lap:K" in message


def test_the_spec_canonicalises_and_validates_features() -> None:
    dataset = {"base": "er", "noise": 0.1}
    a = RunSpec(dataset=dataset, model="gcn", features="RWPE:4+degree")
    b = RunSpec(dataset=dataset, model="gcn", features="degree+rwpe:4")
    assert a.features == "degree+rwpe:4" and a.hash() == b.hash()
    assert RunSpec(dataset=dataset, model="gcn").features == "degree"  # the recipe's, unchanged
    with pytest.raises(GaptuiError, match=r"^spec\.json: features 'lap:x': K 'x'"):
        RunSpec.from_dict({**a.to_dict(), "features": "lap:x"}, "spec.json")


# ---------------------------------------------------------------------------------------------------------------
# Values


def test_rwpe_is_the_return_probability_of_the_random_walk_and_matches_pyg() -> None:
    from torch_geometric.data import Data
    from torch_geometric.transforms import AddRandomWalkPE

    # A triangle 0-1-2 with a tail 2-3, and node 4 isolated.
    ei = _both_ways([(0, 1), (0, 2), (1, 2), (2, 3)])
    (got,) = _one([Part("rwpe", 5)], 5, ei)
    adj = np.zeros((5, 5))
    adj[ei[0], ei[1]] = 1.0
    walk = adj / np.maximum(adj.sum(1, keepdims=True), 1)
    power, hand = np.eye(5), []
    for _ in range(5):
        power = power @ walk
        hand.append(np.diag(power))
    hand = np.stack(hand, 1)
    assert np.allclose(got, hand, atol=1e-6) and (got[4] == 0).all()
    assert got[0, 1] == pytest.approx(1 / 2 * 1 / 2 + 1 / 2 * 1 / 3)  # 0 -> 1 -> 0 or 0 -> 2 -> 0
    pyg = AddRandomWalkPE(5, attr_name="pe")(Data(edge_index=torch.as_tensor(ei), num_nodes=5)).pe.numpy()
    assert np.allclose(got, pyg, atol=1e-6)


def test_lap_matches_pygs_laplacian_eigenvectors_up_to_sign_and_pads_small_graphs() -> None:
    from torch_geometric.data import Data
    from torch_geometric.transforms import AddLaplacianEigenvectorPE

    rng = np.random.default_rng(4)
    graph = bernoulli_graphs(40, 0.2, 1, rng)[0]  # under 100 nodes: PyG's dense (exact) solver
    ei = graph.edge_index()
    (got,) = _one([Part("lap", 6)], 40, ei)
    data = Data(edge_index=torch.as_tensor(ei), num_nodes=40)
    pyg = AddLaplacianEigenvectorPE(6, attr_name="pe", is_undirected=True)(data).pe.numpy()
    sign = np.sign((pyg * got).sum(0))
    assert np.allclose(pyg * sign, got, atol=1e-5)
    assert np.allclose(got.T @ got, np.eye(6), atol=1e-5)
    # A triangle has 2 non-trivial eigenvectors: lap:4 pads with 2 zero columns; one node has none.
    (tri,) = _one([Part("lap", 4)], 3, _both_ways([(0, 1), (1, 2), (0, 2)]))
    assert tri.shape == (3, 4) and np.abs(tri[:, :2]).sum(0).min() > 0.5 and (tri[:, 2:] == 0).all()
    (lone,) = _one([Part("lap", 2), Part("rwpe", 2)], 1, np.zeros((2, 0), np.int64))[:1]
    assert (lone == 0).all()


def test_each_graph_is_computed_from_its_own_edges_only() -> None:
    split = _pairs()
    before = pair_positional(split, "rwpe:4+lap:3")
    # H of pair 0 replaced by another graph: G's rows, and H's rows of the other pairs, stay as they were.
    n, _, _, _ = split.pair(0)
    other = bernoulli_graphs(n, 0.4, 1, np.random.default_rng(9))[0].edge_index()
    ph = split.edge_ptr_h
    eh = np.concatenate([other, split.edge_index_h[:, ph[1] :]], axis=1)
    ptr = np.concatenate([[0], ph[1:] - ph[1] + other.shape[1]])
    changed = PairSplit(split.num_nodes, split.edge_index_g, split.edge_ptr_g, eh, ptr, split.perm)
    after = pair_positional(changed, "rwpe:4+lap:3")
    assert np.array_equal(before.g, after.g)
    assert np.array_equal(before.h[n:], after.h[n:]) and not np.allclose(before.h[:n], after.h[:n])
    # and a batch gathers G's rows then H's, from the split's arrays
    batch = PairTensors(split, features="rwpe:4+lap:3").gather(torch.tensor([2, 0]))
    node_ptr = split.node_ptr
    rows = np.r_[node_ptr[2] : node_ptr[3], node_ptr[0] : node_ptr[1]]
    assert torch.equal(batch.positional, torch.as_tensor(np.concatenate([before.g[rows], before.h[rows]])))


def test_relabelling_a_graph_permutes_its_rows() -> None:
    graph = bernoulli_graphs(30, 0.25, 1, np.random.default_rng(2))[0]
    sigma = np.random.default_rng(3).permutation(30)  # node i becomes node sigma[i]
    relabelled = Graph(30, np.sort(sigma[graph.edges], axis=1))
    parts = [Part("rwpe", 8), Part("lap", 5)]
    rw, lap = _one(parts, 30, graph.edge_index())
    rw2, lap2 = _one(parts, 30, relabelled.edge_index())
    assert np.allclose(rw2[sigma], rw, atol=1e-6)
    values = np.linalg.eigvalsh(np.eye(30) - _sym(graph))
    assert np.diff(values[:7]).min() > 1e-3  # distinct eigenvalues: each eigenvector is defined up to sign
    assert np.allclose(np.abs(lap2[sigma]), np.abs(lap), atol=1e-5)
    assert np.allclose(lap2[sigma], lap, atol=1e-5)  # the power-sum sign rule is equivariant too


def _sym(graph: Graph) -> np.ndarray:
    adj = np.zeros((graph.num_nodes,) * 2)
    ei = graph.edge_index()
    adj[ei[0], ei[1]] = 1.0
    inv = 1 / np.sqrt(adj.sum(1))
    return inv[:, None] * adj * inv[None, :]


# ---------------------------------------------------------------------------------------------------------------
# Sign flips


def test_sign_flips_are_per_graph_and_eigenvector_and_a_function_of_seed_epoch_step() -> None:
    flips = sign_flips("degree+rwpe:3+lap:4", 40, seed=1, epoch=2, step=7)
    assert flips.shape == (40, 7) and (flips[:, :3] == 1).all() and set(flips[:, 3:].unique().tolist()) == {-1, 1}
    assert torch.equal(flips, sign_flips("degree+rwpe:3+lap:4", 40, 1, 2, 7))
    for other in ((2, 2, 7), (1, 3, 7), (1, 2, 8)):
        assert not torch.equal(flips, sign_flips("degree+rwpe:3+lap:4", 40, *other))
    assert not torch.equal(flips[:20], flips[20:])  # G of pair b and H of pair b are flipped apart
    assert sign_flips("degree+rwpe:3", 40, 1, 2, 7) is None


def test_training_flips_signs_evaluation_does_not_and_a_resumed_run_is_exact(monkeypatch) -> None:
    split, val = _pairs(count=24), _pairs(count=6, seed=1)
    data, vdata = PairTensors(split, features="lap:4"), PairTensors(val, features="lap:4")
    calls: list[tuple[int, int]] = []
    real = feat.sign_flips

    def recording(features, graphs, seed, epoch, step, device="cpu"):
        calls.append((epoch, step))
        return real(features, graphs, seed, epoch, step, device)

    monkeypatch.setattr("engine.alignment.training.sign_flips", recording)

    def fresh():
        torch.manual_seed(0)
        model = models.build("gcn", out_dim=8, budget=3000, in_dim=4)
        return (model, *make_optimiser(model, 3e-3, 0.01, 2 * 3, 1))

    def train(model, opt, sched, state, stop=lambda: False) -> bool:
        kw = {"batch_size": 8, "seed": 5, "clip": 0.1, "clip_mode": "value", "features": "lap:4"}
        return train_epoch(model, data, opt, sched, state, should_stop=stop, **kw)

    model, opt, sched = fresh()
    straight = TrainState()
    for _ in range(2):
        train(model, opt, sched, straight)
        straight.next_epoch()
    ref = {k: v.clone() for k, v in model.state_dict().items()}
    assert calls == [(1, 0), (1, 1), (1, 2), (2, 3), (2, 4), (2, 5)]
    with LapEvaluator("serial") as ev:
        first, loss = evaluate(model, vdata, 6, ev, "lap:4")
        again, loss2 = evaluate(model, vdata, 6, ev, "lap:4")
    assert len(calls) == 6 and loss == loss2 and first.lap_correct == again.lap_correct  # no flips
    with torch.no_grad():
        batch = vdata.gather(torch.arange(6))
        plain, _ = similarity(model.eval(), batch, "lap:4")
        flipped, _ = similarity(model, batch, "lap:4", sign_flips("lap:4", 12, 0, 1, 0))
    assert not torch.allclose(plain, flipped)  # the flips do change the input

    model, opt, sched = fresh()
    state, count = TrainState(), {"n": 0}

    def stop_after_two() -> bool:
        count["n"] += 1
        return count["n"] > 2

    assert not train(model, opt, sched, state, stop_after_two)
    saved = (model.state_dict(), opt.state_dict(), sched.state_dict(), TrainState(**vars(state)))
    model, opt, sched = fresh()
    model.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])
    sched.load_state_dict(saved[2])
    state = saved[3]
    calls.clear()
    while state.epoch < 2:
        train(model, opt, sched, state)
        state.next_epoch()
    assert calls == [(1, 2), (2, 3), (2, 4), (2, 5)] and state.step == straight.step == 6
    for key, value in model.state_dict().items():
        assert torch.allclose(value, ref[key], atol=1e-6), key


def test_compile_builds_its_warm_up_batch_with_the_positional_width(monkeypatch) -> None:
    seen: list[tuple[int, ...]] = []
    model = models.build("gcn", out_dim=8, budget=3000, in_dim=parse_features("degree+rwpe:3+lap:2").dim)

    def fake_compile(module, dynamic=True):
        def call(x, edge_index, batch):
            seen.append(tuple(x.shape))
            return module(x, edge_index, batch)

        return call

    monkeypatch.setattr(torch, "compile", fake_compile)
    lines: list[str] = []
    compiled = compile_model(model, "degree+rwpe:3+lap:2", lines.append)
    assert compiled is not model and seen == [(11, 7)] and "compiled" in lines[0]


# ---------------------------------------------------------------------------------------------------------------
# The cache


def test_the_cache_is_reused_and_a_changed_dataset_gets_new_values(tmp_path: Path, monkeypatch) -> None:
    spec = DatasetSpec("er", 0.1, n_train=10, n_val=4, params={"n": 14, "degree": 4})
    dataset, _ = build_dataset(spec, tmp_path / "datasets")
    split = dataset.split("train")
    lines: list[str] = []
    first = dataset_positional(dataset, "train", split, "degree+rwpe:4+lap:3", lines.append)
    assert len(lines) == 1 and "computed" in lines[0]
    entries = sorted(p.name for p in (dataset.path / "positional").iterdir())
    assert len(entries) == 2 and entries[0].startswith("train-lap3-") and entries[1].startswith("train-rwpe4-")
    direct = pair_positional(split, "rwpe:4+lap:3")
    assert np.array_equal(first.g, direct.g) and np.array_equal(first.h, direct.h)

    def fail(*_args, **_kwargs):
        raise AssertionError("computed again")

    monkeypatch.setattr(feat, "split_parts", fail)
    cached = dataset_positional(dataset, "train", split, "lap:3+rwpe:4")  # another order: the same two parts
    assert np.array_equal(cached.g, np.concatenate([first.g[:, 4:], first.g[:, :4]], axis=1))
    monkeypatch.undo()

    # The same dataset id with other H edges (another recorded fingerprint): new values, G's unchanged.
    ph = split.edge_ptr_h
    flipped = split.edge_index_h.copy()
    flipped[:, ph[0] : ph[1]] = (split.edge_index_h[:, ph[0] : ph[1]] + 1) % 14  # H of pair 0 relabelled
    changed = PairSplit(split.num_nodes, split.edge_index_g, split.edge_ptr_g, flipped, ph, split.perm)
    files = json.loads(json.dumps(dataset.meta["files"]))
    files["train/edge_index_h.npy"]["sha256"] = "0" * 64
    other = Dataset(dataset.id, dataset.path, {**dataset.meta, "files": files})
    new = dataset_positional(other, "train", changed, "degree+rwpe:4+lap:3")
    assert np.array_equal(new.g, first.g) and not np.array_equal(new.h, first.h)
    assert len(list((dataset.path / "positional").iterdir())) == 4

    # A cached file altered on disk is moved aside (one warning) and computed again.
    target = dataset.path / "positional" / entries[1] / "g.npy"
    target.write_bytes(target.read_bytes()[:-4] + b"\0\0\0\0")
    warnings: list[str] = []
    monkeypatch.setattr("engine.cache.say_stderr", warnings.append)
    again = dataset_positional(dataset, "train", split, "degree+rwpe:4+lap:3")
    assert np.array_equal(again.g, first.g) and len(warnings) == 1 and "corrupt" in warnings[0]


# ---------------------------------------------------------------------------------------------------------------
# End to end: the worker, GAPE, the command line


def _train_run(ws: Path, features: str) -> Path:
    from engine.worker import main

    spec = RunSpec(
        dataset={"base": "er", "noise": 0.05, "n_train": 24, "n_val": 8, "params": {"n": 16, "degree": 4}},
        model="gin",
        features=features,
        epochs=2,
        budget=4000,
        out_dim=8,
        batch_size=8,
        device="cpu",
        compile="off",
        datasets_dir=str(ws / "datasets"),
    )
    run_dir = ws / "runs" / spec.hash()[:12]
    run_dir.mkdir(parents=True)
    (run_dir / "spec.json").write_text(json.dumps(spec.to_dict()))
    assert main(["--spec", str(run_dir / "spec.json"), "--out", str(run_dir), "--quiet"]) == 0
    return run_dir


@pytest.fixture(scope="module")
def rwpe_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return _train_run(tmp_path_factory.mktemp("ws"), "degree+rwpe:4")


def test_a_run_trains_with_rwpe_and_one_with_lap_caching_their_inputs(rwpe_run: Path) -> None:
    from engine.checkpoints import read_checkpoint

    lap_run = _train_run(rwpe_run.parents[1], "lap:4")
    for run_dir, dim in ((rwpe_run, 6), (lap_run, 4)):
        result = json.loads((run_dir / "result.json").read_text())
        assert result["status"] == "done" and 0 <= result["metrics"]["val_lap_acc"] <= 1
        assert read_checkpoint(run_dir / "checkpoint.pt")["in_dim"] == dim
        assert "positional inputs" in (run_dir / "log.txt").read_text()
    cached = sorted(p.name.split("-")[:2] for p in (rwpe_run.parents[1] / "datasets").glob("*/positional/*"))
    assert cached == [["train", "lap4"], ["train", "rwpe4"], ["val", "lap4"], ["val", "rwpe4"]]


def test_gape_embeds_with_the_positional_inputs_the_run_trained_on(rwpe_run: Path) -> None:
    from engine.alignment.training import node_features
    from engine.gape.embed import load_frozen

    frozen = load_frozen(rwpe_run)
    assert frozen.features == "degree+rwpe:4"
    rng = np.random.default_rng(5)
    graphs = bernoulli_graphs(12, 0.3, 2, rng) + bernoulli_graphs(9, 0.4, 1, rng)
    got = frozen.embed_graphs(graphs)
    ptr = np.concatenate([[0], np.cumsum([g.num_nodes for g in graphs])])
    for i, g in enumerate(graphs):
        ei = torch.as_tensor(g.edge_index())
        x = node_features("degree+rwpe:4", ei, g.num_nodes)
        assert x.shape == (g.num_nodes, 6)
        with torch.no_grad():
            hand = frozen.model(x, ei, torch.zeros(g.num_nodes, dtype=torch.long)).numpy()
        assert np.allclose(got[ptr[i] : ptr[i + 1]], hand, atol=5e-3), i


@pytest.mark.e2e
def test_gaptui_train_with_bad_features_is_one_error_line(tmp_path: Path) -> None:
    args = ["train", "--base", "er", "--noise", "0.1", "--model", "gcn", "--train", "10", "--val", "4"]
    res = run_cli(*args, "-p", "n=12", "--features", "bogus:3", "-w", str(tmp_path / "ws"), cwd=tmp_path)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and "features 'bogus:3': unknown kind 'bogus'" in lines[0]


def test_a_preset_with_bad_features_is_one_line_and_a_good_one_plans() -> None:
    from engine.alignment.preset import grid, parse_preset
    from engine.tasks import Placement

    doc = {
        "noise": [0.1],
        "models": ["gcn"],
        "seeds": [0],
        "run": {"epochs": 1, "budget": 3000, "out_dim": 8, "features": "degree+lap:x"},
        "datasets": [{"base": "er", "params": {"n": 12, "degree": 3}, "train": 4, "val": 2}],
    }
    with pytest.raises(GaptuiError) as err:
        parse_preset(doc, Path("p.toml"))
    assert "\n" not in str(err.value) and "features 'degree+lap:x': K 'x' of 'lap'" in str(err.value)
    doc["run"]["features"] = "LAP:3+ones"
    (spec,) = grid(parse_preset(doc, Path("p.toml")), Placement(".", "."))
    assert spec.features == "ones+lap:3"
