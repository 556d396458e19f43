"""Probes of finished alignment runs: layer states, the per-layer measures, the edge probe, ``gaptui probe``, the
probes section of ``gaptui show`` and of the app's run detail."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from engine import models
from engine.alignment.probes import LayerTally, ProbeOptions, batch_states, tally_layer
from engine.alignment.reconstruction import EdgeSample, balanced_accuracy, edge_probe, roc_auc, sample_node_pairs
from engine.alignment.spec import RunSpec
from engine.alignment.training import PairTensors
from engine.errors import GaptuiError
from engine.pairs import PairSplit
from tests.support.cli import run_cli
from tests.support.tui import shown


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def tiny_spec(ws: Path, model: str = "gin", **fields: object) -> RunSpec:
    dataset = {"base": "er", "noise": 0.1, "params": {"n": 12, "degree": 3}, "n_train": 40, "n_val": 10}
    options = {"model": model, "epochs": 2, "budget": 4000, "out_dim": 8, "batch_size": 20, "device": "cpu"}
    return RunSpec(dataset=dataset, **{**options, "datasets_dir": str(ws / "datasets"), **fields})  # type: ignore[arg-type]


def train(ws: Path, spec: RunSpec) -> Path:
    """The run of ``spec`` trained with ``gaptui train --spec`` (so the history records it); its folder."""
    ws.mkdir(parents=True, exist_ok=True)
    spec_file = ws / f"{spec.hash()[:12]}.spec.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    res = run_cli("train", "--spec", str(spec_file), "-w", str(ws), "--json")
    assert res.returncode == 0, res.stderr
    return ws / "runs" / spec.hash()[:12]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A workspace with two finished runs on tiny ER pairs: gin trained by ``gaptui train`` (in the history), gcn by
    the worker in this process (a run folder only)."""
    from engine.worker import main

    ws = tmp_path_factory.mktemp("probes") / "ws"
    gin = train(ws, tiny_spec(ws, "gin"))
    spec = tiny_spec(ws, "gcn")
    gcn = ws / "runs" / spec.hash()[:12]
    gcn.mkdir(parents=True)
    (gcn / "spec.json").write_text(json.dumps(spec.to_dict()))
    assert main(["--spec", str(gcn / "spec.json"), "--out", str(gcn), "--quiet"]) == 0
    return ws, gin, gcn


def probe_here(ws: Path, run: Path) -> dict:
    """The probes of ``run``, computed in this process (as ``gaptui probe RUN --pairs 6 --graphs 20`` would)."""
    from engine.alignment.probes import open_probe_inputs, probe_run

    return probe_run(open_probe_inputs(run, ws / "datasets", None), ProbeOptions(pairs=6, graphs=20))


# ---------------------------------------------------------------------------------------------------------------
# Layer states


def _graph_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    edges = torch.tensor([[0, 1], [1, 2], [2, 0], [2, 3], [4, 5], [5, 6]])
    edge_index = torch.cat([edges, edges.flip(1)]).t().contiguous()
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    x = torch.ones(7, 2)
    x[:, 1] = torch.log1p(torch.bincount(edge_index[0], minlength=7).float())
    return x, edge_index, batch


@pytest.mark.parametrize("name", models.names())
def test_layer_states_end_in_the_forward_output_for_every_model(name: str) -> None:
    torch.manual_seed(0)
    model = models.build(name, out_dim=8, in_dim=2, width=16).eval()
    x, edge_index, batch = _graph_batch()
    with torch.no_grad():
        states = model.layer_states(x, edge_index, batch)
        out = model(x, edge_index, batch)
    names = [n for n, _ in states]
    assert names[0] == "input" and names[-1] == "output"
    assert names[1:-1] == [f"block {i + 1}" for i in range(len(model.convs))]
    assert all(s.shape == (7, model.width) for _, s in states[:-1])
    assert torch.equal(states[-1][1], out)  # the same computation, nothing added to forward


def test_batch_states_start_with_the_inputs_and_a_plain_model_gives_its_output() -> None:
    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 3)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    split = _pair_split()
    batch = PairTensors(split).gather(torch.arange(2))
    states = batch_states(Plain(), batch, "degree")
    assert [n for n, _ in states] == ["features", "output"]
    assert states[0][1].shape == (2 * 7, 2) and states[1][1].shape == (2 * 7, 3)


# ---------------------------------------------------------------------------------------------------------------
# Per-layer measures


def _pair_split() -> PairSplit:
    """Two pairs: a 4-node path and a triangle, each H the same graph relabelled by a known permutation."""
    graphs = [(4, np.array([[0, 1], [1, 2], [2, 3]])), (3, np.array([[0, 1], [1, 2], [0, 2]]))]
    perms = [np.array([2, 0, 3, 1]), np.array([1, 2, 0])]
    g_parts, h_parts = [], []
    for (_, edges), perm in zip(graphs, perms, strict=True):
        both = np.concatenate([edges, edges[:, ::-1]])
        g_parts.append(both[np.lexsort((both[:, 1], both[:, 0]))].T)
        moved = perm[both]
        h_parts.append(moved[np.lexsort((moved[:, 1], moved[:, 0]))].T)
    ptr = np.array([0, g_parts[0].shape[1], g_parts[0].shape[1] + g_parts[1].shape[1]])
    return PairSplit(
        np.array([4, 3]),
        np.concatenate(g_parts, axis=1),
        ptr,
        np.concatenate(h_parts, axis=1),
        ptr.copy(),
        np.concatenate(perms),
    )


def test_energy_stability_and_nearest_on_hand_made_states() -> None:
    split = _pair_split()
    batch = PairTensors(split).gather(torch.arange(2))
    # G's node i gets state e_i (one-hot); H's node perm(i) gets the same state: a perfectly stable embedding.
    g = torch.zeros(7, 4)
    g[[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 0, 1, 2]] = 1.0
    h = torch.zeros(7, 4)
    h[torch.as_tensor(np.concatenate([split.perm[:4], 4 + split.perm[4:]]))] = g
    tally = LayerTally("layer", 4)
    tally_layer(tally, torch.cat([g, h]), batch, torch.tensor([1, 1]))
    row = tally.row()
    # path: 3 edges each |e_i - e_j|^2 = 2, both directions -> 12 / 4 nodes; triangle: 3 * 2 * 2 / 3 = 4
    assert row["energy"] == pytest.approx((12 / 4 + 12 / 3) / 2)
    assert row["stability"] == pytest.approx(1.0) and row["unmatched"] == pytest.approx(0.0)
    assert row["nearest"] == pytest.approx(1.0) and row["abs_cos"] == pytest.approx(0.0)
    # one-hot states: tr(X^T L X) = 2 per edge; centred spread sum |e_i - mean|^2 = n - 1; over the mean degree
    path = (3 * 2) / (4 - 1) / (6 / 4)
    triangle = (3 * 2) / (3 - 1) / 2
    assert row["energy_ratio"] == pytest.approx((path + triangle) / 2)


def test_constant_states_have_no_energy_ratio_and_full_abs_cos() -> None:
    split = _pair_split()
    batch = PairTensors(split).gather(torch.arange(2))
    tally = LayerTally("features", 1)
    tally_layer(tally, torch.ones(14, 1), batch, torch.tensor([1, 2]))
    row = tally.row()
    assert row["energy"] == 0 and row["energy_ratio"] is None  # no spread: not defined
    assert row["stability"] == pytest.approx(1.0) and row["unmatched"] == pytest.approx(1.0)
    assert row["abs_cos"] == pytest.approx(((12 / 16) + (6 / 9)) / 2)  # off-diagonal pairs over n^2 (ngab's)


# ---------------------------------------------------------------------------------------------------------------
# The edge probe


def test_node_pairs_are_drawn_uniformly_and_labelled_by_the_edges() -> None:
    rng = np.random.default_rng(0)
    edges = [np.array([[0, 1], [1, 2]]), np.array([[0, 3], [2, 4]])]
    sample = sample_node_pairs(np.array([3, 5]), edges, 100, rng)
    assert len(sample) == 3 + 10  # every pair of each graph when there are few
    keys = set(zip(sample.left.tolist(), sample.right.tolist(), strict=True))
    assert {(0, 1), (1, 2), (3, 6), (5, 7)} <= keys
    assert sample.label.sum() == 4 and all(left < right for left, right in keys)
    few = sample_node_pairs(np.array([30]), [np.array([[0, 1]])], 50, rng)
    assert len(few) == 50 and len(set(zip(few.left.tolist(), few.right.tolist(), strict=True))) == 50


def test_roc_auc_and_balanced_accuracy_match_their_definitions() -> None:
    rng = np.random.default_rng(1)
    score = rng.integers(0, 5, 200).astype(float)  # many ties
    label = rng.random(200) < 0.3
    pos, neg = score[label], score[~label]
    brute = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (pos.size * neg.size)
    assert roc_auc(score, label) == pytest.approx(brute)
    predicted = score > 2
    expected = (predicted[label].mean() + (~predicted[~label]).mean()) / 2
    assert balanced_accuracy(predicted, label) == pytest.approx(expected)
    assert np.isnan(roc_auc(score, np.ones(200, bool))) and np.isnan(balanced_accuracy(predicted, np.zeros(200, bool)))


@pytest.mark.e2e
def test_the_edge_probe_reads_edges_that_the_states_decide_and_not_from_noise() -> None:
    rng = np.random.default_rng(2)
    n, graphs = 30, 8
    # random geometric graphs: nodes joined when closer than 0.3; the states are the positions, so |x_i - x_j|
    # (a feature of the probe) tells edges apart
    positions = [rng.random((n, 2)) for _ in range(graphs)]
    edges = []
    for pos in positions:
        close = np.linalg.norm(pos[:, None] - pos[None], axis=-1) < 0.3
        edges.append(np.argwhere(np.triu(close, 1)))
    states = torch.as_tensor(np.concatenate(positions), dtype=torch.float32)
    sample = sample_node_pairs(np.full(graphs, n), edges, 1000, rng)
    half = int(np.searchsorted(sample.left, n * graphs // 2))
    train = EdgeSample(sample.left[:half], sample.right[:half], sample.label[:half])
    test = EdgeSample(sample.left[half:], sample.right[half:], sample.label[half:])
    informed = edge_probe(states, train, states, test)
    assert informed.auc > 0.95 and informed.accuracy > informed.majority and informed.balanced_accuracy > 0.8
    noise = edge_probe(torch.randn(n * graphs, 16), train, torch.randn(n * graphs, 16), test)
    assert 0.35 < noise.auc < 0.65
    assert noise.majority == pytest.approx(1 - test.label.mean())


# ---------------------------------------------------------------------------------------------------------------
# gaptui probe, show and the run detail


@pytest.mark.e2e
def test_probe_command_writes_the_report_reuses_it_and_draws_the_figures(trained, tmp_path: Path) -> None:
    ws, gin, gcn = trained
    res = run_cli("probe", gin.name, "-w", str(ws), "--pairs", "6", "--graphs", "20", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)["reports"][0]
    assert report["run"] == RunSpec.from_file(gin / "spec.json").hash()
    layers = [row["layer"] for row in report["layers"]]
    assert layers == ["features", "input", "block 1", "block 2", "block 3", "output"]
    recon = report["reconstruction"]
    assert recon["test_graphs"] == 6 and recon["train_graphs"] == 20
    assert 0 <= recon["balanced_accuracy"] <= 1 and 0 <= recon["auc"] <= 1
    assert recon["majority"] == pytest.approx(1 - recon["edge_rate"])  # sparse graphs: non-edges are the majority
    assert json.loads((gin / "probes.json").read_text()) == report
    again = json.loads(run_cli("probe", gin.name, "-w", str(ws), "--pairs", "6", "--graphs", "20", "--json").stdout)
    assert again["reports"][0]["computed"] == report["computed"]  # same options: the stored report
    out = tmp_path / "figs"
    both = run_cli("probe", gin.name, gcn.name, "-w", str(ws), "--pairs", "6", "--graphs", "20", "--figures", str(out))
    assert both.returncode == 0, both.stderr
    assert "edge reconstruction from the output embeddings" in both.stdout and "block 3" in both.stdout
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == sorted([f"probe-{gin.name}.png", f"probe-{gcn.name}.png", "probes-compare.png"])
    assert all((out / name).stat().st_size > 10_000 for name in names)


@pytest.mark.e2e
def test_show_prints_the_probes_and_the_json_holds_them(trained) -> None:
    ws, gin, _ = trained
    probe_here(ws, gin)
    shown = run_cli("show", gin.name, "-w", str(ws))
    assert shown.returncode == 0, shown.stderr
    assert "probes of er" in shown.stdout and "edge reconstruction" in shown.stdout and "nearest" in shown.stdout
    doc = json.loads(run_cli("show", gin.name, "-w", str(ws), "--json").stdout)
    assert doc["probes"]["layers"][-1]["layer"] == "output"


@pytest.mark.e2e
def test_a_probe_of_another_family_s_run_is_one_error_line(trained) -> None:
    ws, gin, _ = trained
    folder = ws / "runs" / "fakegape0000"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.json").write_text(json.dumps({"task": "gape", "dataset": {"base": "ringmol"}}))
    res = run_cli("probe", gin.name, "fakegape", "-w", str(ws))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip() == "error: run fakegape0000: a gape run; probes read finished alignment runs only"


@pytest.mark.e2e
def test_a_probe_of_a_run_that_has_not_finished_is_one_error_line(trained, tmp_path: Path) -> None:
    ws, gin, _ = trained
    folder = tmp_path / "unfinished"
    folder.mkdir()
    (folder / "spec.json").write_text((gin / "spec.json").read_text())  # a run started, no result yet
    res = run_cli("probe", str(folder), "-w", str(ws))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip() == "error: run unfinished has not finished (status: no result yet)"


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("running", "run fake has not finished (status: no result yet)"),
        ("failed", "run fake has not finished (status: failed)"),
        ("laplacian", "training-free Laplacian baseline"),
        ("unreadable", "run fake: not a readable run spec"),
    ],
)
def test_probes_refuse_what_is_not_a_finished_trained_alignment_run(trained, tmp_path: Path, case, expected) -> None:
    from engine.alignment.probes import open_probe_inputs

    ws, gin, _ = trained
    folder = tmp_path / "fake"
    folder.mkdir()
    raw = json.loads((gin / "spec.json").read_text())
    if case == "laplacian":
        raw["model"] = "laplacian"
    if case in ("laplacian", "failed"):
        (folder / "result.json").write_text(json.dumps({"status": "done" if case == "laplacian" else "failed"}))
    (folder / "spec.json").write_text("{not json" if case == "unreadable" else json.dumps(raw))
    with pytest.raises(GaptuiError, match=re.escape(expected)):
        open_probe_inputs(folder, ws / "datasets", None)


@pytest.mark.e2e
def test_probe_options_are_checked_and_unknown_runs_named(trained) -> None:
    from engine.gape.embed import resolve_run

    ws, _, _ = trained
    with pytest.raises(GaptuiError, match="--node-pairs 0: expected a count >= 1"):
        ProbeOptions(node_pairs=0).check()
    with pytest.raises(GaptuiError, match="--seed -1"):
        ProbeOptions(seed=-1).check()
    with pytest.raises(GaptuiError, match="no run 'ffffffffffff'"):
        resolve_run("ffffffffffff", ws / "runs")


@pytest.mark.e2e
@pytest.mark.asyncio
async def test_the_run_detail_shows_the_probes_and_reads_them_again(trained) -> None:
    from textual.widgets import Static, TabbedContent

    from gaptui.tui.app import GaptuiApp
    from gaptui.tui.screens.run_detail import RunDetailScreen
    from gaptui.workspace import Workspace

    ws, gin, _ = trained
    (gin / "probes.json").unlink(missing_ok=True)
    app = GaptuiApp(Workspace(ws))
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(RunDetailScreen(RunSpec.from_file(gin / "spec.json").hash()))
        await pilot.pause()
        detail = app.screen
        assert "No probes in this run's folder yet" in shown(detail.query_one("#probes", Static), width=120)
        probe_here(ws, gin)  # a probe command run while the screen is open
        await pilot.press("p")
        await pilot.pause()
        assert detail.query_one("#detail-tabs", TabbedContent).active == "tab-probes"
        text = shown(detail.query_one("#probes", Static), width=120)
        assert "edge reconstruction from the output embeddings" in text and "block 3" in text, text
        await pilot.press("ctrl+q")


def test_runs_of_different_depths_line_up_at_their_input_and_output() -> None:
    from gaptui.families.alignment.probe_figures import layer_axis

    def report(*names: str) -> dict:
        return {"layers": [{"layer": n} for n in names]}

    deep = report("features", "input", "block 1", "block 2", "block 3", "block 4", "output")
    shallow = report("features", "input", "block 1", "block 2", "block 3", "output")
    plain = report("features", "output")  # a user's model without layer_states
    axis = layer_axis([shallow, plain, deep])
    assert axis == ["features", "input", "block 1", "block 2", "block 3", "block 4", "output"]
    assert axis.index("output") == 6  # every run's output at the same place, whatever its depth
