"""Training-free solver rows: the solvers themselves, their specs and run ids, preset keys, the memory check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.alignment.noise import correlate
from engine.alignment.preset import dump_preset, grid, is_reference_row, parse_preset
from engine.alignment.solvers import SOLVERS, score_split, solver_options
from engine.alignment.spec import RunSpec
from engine.errors import GaptuiError
from engine.sources.synthetic import bernoulli_graphs
from engine.tasks.spec import Placement

DATASET = {"base": "er", "noise": 0.12, "params": {"n": 100, "degree": 8}, "n_train": 5000, "n_val": 500}


def test_run_ids_of_specs_without_solver_options_are_what_they_were() -> None:
    # Hashes computed by the code before solvers and decoders existed: the new fields never enter them unset.
    pinned = {
        "laplacian": ({"model": "laplacian"}, "e9e2503df28e0e39"),
        "gcn": ({"model": "gcn"}, "332f28e5e8f7468d"),
        "gatv2 paper": ({"model": "gatv2", "recipe": "paper", "epochs": 300}, "0950c1ab46ff47c5"),
        "ggnn options": ({"model": "ggnn", "model_kwargs": {"steps": 2}}, "90beaa7e68532c85"),
        "gin rwpe": ({"model": "gin", "features": "degree+rwpe:16"}, "1184de784d37eb89"),
    }
    for name, (fields, digest) in pinned.items():
        assert RunSpec.from_dict({"dataset": DATASET, **fields}).hash()[:16] == digest, name


def test_solver_options_at_their_defaults_are_no_options() -> None:
    plain = RunSpec.from_dict({"dataset": DATASET, "model": "faq"})
    explicit = RunSpec.from_dict({"dataset": DATASET, "model": "FAQ", "model_kwargs": {"init": "grampa", "tol": 0.03}})
    other = RunSpec.from_dict({"dataset": DATASET, "model": "faq", "model_kwargs": {"init": "barycenter"}})
    assert plain.hash() == explicit.hash() != other.hash()
    # A solver trains nothing: the grid's training options are not part of what it computes.
    trained_options = RunSpec.from_dict({"dataset": DATASET, "model": "faq", "epochs": 3, "recipe": "paper"})
    assert trained_options.hash() == plain.hash()
    assert set(plain.canonical()) == {"task", "dataset", "model", "model_kwargs", "topk", "seed"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": "faq", "model_kwargs": {"inti": "grampa"}}, "unknown key 'inti'"),
        ({"model": "faq", "model_kwargs": {"init": "random"}}, "faq option init 'random' is not one of"),
        ({"model": "faq", "model_kwargs": {"maxiter": 0}}, "maxiter = 0 must be >= 1"),
        ({"model": "grampa", "model_kwargs": {"eta": -1.0}}, "eta = -1.0 must be > 0"),
        ({"model": "fqa"}, "did you mean 'faq'"),
        ({"model": "gcn", "decoder": "fa"}, "decoder 'fa' is not one of faq"),
        ({"model": "laplacian", "decoder": "faq"}, "'laplacian' trains none"),
        ({"model": "grampa", "decoder": "faq"}, "'grampa' trains none"),
    ],
)
def test_bad_solver_specs_are_refused_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(GaptuiError, match=message) as err:
        RunSpec.from_dict({"dataset": DATASET, **fields}).validate("spec")
    assert "\n" not in str(err.value)


def test_rrwm_without_its_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pygmtools" else real(name, *a))
    with pytest.raises(GaptuiError, match=r"needs the package pygmtools: pip install 'gaptui\[solvers\]'"):
        RunSpec.from_dict({"dataset": DATASET, "model": "rrwm"}).validate("spec")


def test_rrwm_on_graphs_too_large_is_refused_by_the_memory_check(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    # The memory check needs no pygmtools (an optional extra): a spec naming rrwm parses as where it is installed.
    real = importlib.util.find_spec
    present = importlib.util.find_spec("json")
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: present if name == "pygmtools" else real(name, *a)
    )
    spec = RunSpec.from_dict({"dataset": {**DATASET, "params": {"n": 3000, "degree": 8}}, "model": "rrwm"})
    need = spec.solver_need()
    assert need is not None and need.need >= 8 * 3000**4
    with pytest.raises(GaptuiError, match="solver rrwm on er needs about .* affinity matrix"):
        need.check()
    assert RunSpec.from_dict({"dataset": DATASET, "model": "faq"}).solver_need() is None


def _pairs(eta: float, count: int = 6, seed: int = 0):
    graphs = bernoulli_graphs(60, 8 / 59, count, np.random.default_rng(seed))
    return correlate(graphs, "add_remove", eta, np.random.default_rng(seed + 1))[0]


@pytest.mark.parametrize("name", ["grampa", "faq"])
def test_solvers_recover_a_relabelled_graph_without_noise(name: str) -> None:
    scores, seconds = score_split(_pairs(0.0), name, solver_options(name, {}), ks=(1, 5), workers=1)
    assert scores.lap_acc == 1.0 and seconds.shape == (6,) and (seconds > 0).all()


def test_faq_from_a_start_keeps_a_right_start_and_pools_agree() -> None:
    split = _pairs(0.05)
    options = solver_options("faq", {})
    from_truth, _ = score_split(split, "faq", options, ks=(1,), workers=1, starts=split.perm)
    assert from_truth.lap_acc == 1.0
    serial, _ = score_split(split, "faq", options, ks=(1,), workers=1)
    threads, _ = score_split(split, "faq", options, ks=(1,), workers=2, pool="thread")
    assert serial.assignment.tolist() == threads.assignment.tolist()


def test_a_similarity_solver_has_argmax_and_top_k_and_faq_a_permutation() -> None:
    split = _pairs(0.04)
    grampa, _ = score_split(split, "grampa", solver_options("grampa", {}), ks=(1, 5), workers=1)
    assert SOLVERS["grampa"].similarity and grampa.topk_correct[5] >= grampa.topk_correct[1]
    faq, _ = score_split(split, "faq", solver_options("faq", {}), ks=(1, 5), workers=1)
    assert not SOLVERS["faq"].similarity and faq.topk_correct == {} and faq.argmax_correct == 0


def test_rrwm_through_pygmtools_solves_a_small_pair() -> None:
    pytest.importorskip("pygmtools")
    graphs = bernoulli_graphs(12, 0.3, 2, np.random.default_rng(4))
    split = correlate(graphs, "add_remove", 0.0, np.random.default_rng(5))[0]
    scores, _ = score_split(split, "rrwm", solver_options("rrwm", {}), ks=(1,), workers=1)
    assert scores.lap_acc > 0.5


PRESET = {
    "noise": [0.04, 0.12],
    "models": ["gcn"],
    "seeds": [0, 1],
    "laplacian": True,
    "solvers": ["faq", "faq[init=barycenter,maxiter=50]", "grampa"],
    "decoders": ["faq"],
    "run": {"epochs": 2},
    "datasets": [{"base": "er", "params": {"n": 20, "degree": 4}, "train": 10, "val": 5}],
}


def test_a_preset_plans_solvers_once_per_cell_and_a_decoder_after_each_run() -> None:
    from engine.alignment.family import Alignment

    preset = parse_preset(PRESET)
    specs = grid(preset, Placement(".", "."))
    assert preset.size == len(specs) == 2 * (1 + 3) + 2 * 2 * 2
    rows = [Alignment().record_axes(s)["model"] for s in specs[:6]]
    assert rows == ["laplacian", "faq", "faq[init=barycenter,maxiter=50]", "grampa", "gcn", "gcn+faq"]
    decoded = specs[5]
    assert Alignment().dependencies(decoded) == (specs[4].hash(),)
    assert all(is_reference_row(r) for r in rows if r != "gcn") and not is_reference_row("gcn")
    # Written back and read again: the same grid.
    path = Path(__file__).parent / "unused.toml"
    again = parse_preset(__import__("tomllib").loads(dump_preset(preset)), path)
    assert [s.hash() for s in grid(again, Placement(".", "."))] == [s.hash() for s in specs]


def test_model_options_of_a_solver_and_a_solver_among_the_models() -> None:
    raw = {**PRESET, "models": ["gcn", "umeyama"], "solvers": ["faq"], "model_options": {"faq": {"maxiter": 60}}}
    preset = parse_preset(raw)
    assert preset.solvers == ("faq[maxiter=60]", "umeyama") and preset.models == ("gcn",)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"solvers": ["faq", "grampah"]}, "key 'solvers' value 'grampah' is not a solver .*did you mean 'grampa'"),
        ({"solvers": ["faq[init=nowhere]"]}, "faq option init 'nowhere'"),
        ({"solvers": ["faq[init]"]}, "option 'init' is not key=value"),
        ({"decoders": ["fqa"]}, "key 'decoders' value 'fqa' is not a decoder"),
        ({"model_options": {"faq": {"tool": 1}}}, "unknown key 'tool'"),
    ],
)
def test_bad_solver_keys_of_a_preset_are_refused_in_one_line(change: dict, message: str) -> None:
    with pytest.raises(GaptuiError, match=message) as err:
        parse_preset({**PRESET, **change})
    assert "\n" not in str(err.value)


def test_a_preset_of_solvers_alone_needs_no_models() -> None:
    raw = {k: v for k, v in PRESET.items() if k not in ("models", "decoders")}
    assert parse_preset(raw).size == 2 * (1 + 3)
    with pytest.raises(GaptuiError, match="missing key 'models'"):
        parse_preset({k: v for k, v in raw.items() if k != "solvers"})
