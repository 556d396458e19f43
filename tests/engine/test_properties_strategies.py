"""Training strategies of the property study: identity, data each may see, schedules, adversarial labels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engine.errors import GaptuiError
from engine.properties.definitions import PROPERTY_NAMES, get_property, suite_sizes
from engine.properties.options import TrainOptions
from engine.properties.strategies import (
    STRATEGIES,
    Strategy,
    adversarial_batch,
    entry_epoch,
    finetune_epochs,
    flip_cells,
    train_sizes,
    trained_by,
)
from engine.properties.strategies import (
    test_sizes as sizes_tested,
)
from engine.properties.study import cell_datasets, run_cell
from engine.properties.training import LabelledGraphs, PropertyTraining, load_study_data
from engine.tasks import FAMILIES, Placement, load_spec

RAW = {"task": "properties", "property": "symmetric", "pooling": "mean", "dimension": "generalisation"}
TINY = {"datasets_dir": None, "graphs": 40, "sizes": 5, "negatives": None, "data_seed": 0}
OPTIONS = TrainOptions(epochs=3, batch_size=16, hidden=8, layers=1)


def _kinds(events: list[str]) -> Callable[..., None]:
    """An emitter recording the kinds of a run's events, but for ``progress`` (where it is, said now and then)."""

    def emit(kind: str, **_fields: Any) -> None:
        if kind != "progress":
            events.append(kind)

    return emit


def test_standard_keeps_the_run_ids_and_a_strategy_hashes_only_its_own_option() -> None:
    plain = load_spec(RAW)
    assert "strategy" not in plain.canonical() and "progressive_k" not in plain.canonical()
    # options of strategies not in use never change an id
    assert plain.replace(progressive_k=5, finetune_share=0.3, adversarial_share=0.2).hash() == plain.hash()
    prog = plain.replace(strategy="progressive")
    assert prog.hash() != plain.hash() and prog.canonical()["progressive_k"] == 2
    assert prog.replace(progressive_k=3).hash() != prog.hash()
    assert prog.replace(adversarial_share=0.1).hash() == prog.hash()
    adv = plain.replace(strategy="adversarial")
    assert adv.replace(adversarial_share=0.25).hash() != adv.hash() == adv.replace(progressive_k=4).hash()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"strategy": "finetune"}, "did you mean 'finetune_perturb'"),
        ({"strategy": "finetune_perturb", "dimension": "robustness"}, "has no robustness dimension"),
        ({"strategy": "finetune_perturb", "epochs": 1}, "finetune_perturb needs epochs >= 2"),
        ({"strategy": "progressive", "sizes": 3}, "progressive_k = 2: training on sizes 5..7 leaves no larger"),
        ({"progressive_k": 0}, "progressive_k = 0 must be >= 1"),
        ({"finetune_share": 1.0}, "finetune_share = 1.0: expected a share strictly between 0 and 1"),
        ({"adversarial_share": 0}, "adversarial_share = 0.0: expected a share in"),
    ],
)
def test_bad_strategy_specs_name_the_culprit(fields: dict, message: str) -> None:
    with pytest.raises(GaptuiError, match=message):
        load_spec({**RAW, **fields})


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_no_size_trained_on_is_a_size_evaluated(strategy: str, k: int) -> None:
    for name in PROPERTY_NAMES:
        sizes = suite_sizes(name)
        trained, tested = train_sizes(sizes, strategy, k), sizes_tested(sizes, strategy, k)
        assert trained[0] == sizes[0] and tested and max(trained) < min(tested)
        assert trained == (sizes[: k + 1] if strategy == "progressive" else sizes[:1])
        assert set(trained) | set(tested) == set(sizes)
        for dim in ("generalisation", "sensitivity"):
            specs = cell_datasets(name, dim, 100, None, None, 0, Strategy(strategy, progressive_k=k))
            test_family = "random" if dim == "generalisation" else "perturb"
            trains = {s.n for s in specs if s.n in trained}
            tests = [s for s in specs if s.n not in trained]
            assert trains == set(trained) and {s.n for s in tests} == set(tested)
            assert all(s.family == test_family for s in tests)


def test_progressive_data_span_base_to_base_plus_k_and_tests_lie_above(tmp_path: Path) -> None:
    data = load_study_data(
        "symmetric", "random", datasets_dir=tmp_path, graphs=40, sizes=5, strategy=Strategy("progressive")
    )
    trained = [g.n for g in (data.train, *data.more_train)]
    assert trained == [5, 6, 7] and [g.n for g in data.tests["random"]] == [8, 9]
    # as many training graphs as a standard run: graphs // (k + 1), even, of each size
    assert [len(g.labels) for g in (data.train, *data.more_train)] == [12, 12, 12]


def test_progressive_sizes_enter_epoch_by_epoch_smallest_first() -> None:
    assert [entry_epoch(j, 2, 6) for j in range(3)] == [1, 3, 5]
    sets = tuple(LabelledGraphs(n, np.zeros((8, n, n), bool), np.arange(8) % 2) for n in (5, 6, 7))
    task = PropertyTraining(
        sets[0], "mean", TrainOptions(epochs=6, batch_size=4, hidden=8, layers=1), 0, torch.device("cpu"),
        strategy=Strategy("progressive"), more_train=sets[1:],
    )  # fmt: skip
    assert [task.active_sets(e) for e in range(1, 7)] == [[0], [0], [0, 1], [0, 1], [0, 1, 2], [0, 1, 2]]
    order = [j for j, _ in task.batch_plan(6)]
    assert order == sorted(order) == [0, 0, 1, 1, 2, 2]


def test_finetune_trains_on_graphrandom_then_graphperturb() -> None:
    assert finetune_epochs(10, 0.5) == 5 and finetune_epochs(3, 0.1) == 1 and finetune_epochs(3, 0.9) == 2
    a = LabelledGraphs(5, np.zeros((8, 5, 5), bool), np.arange(8) % 2)
    b = LabelledGraphs(5, np.ones((8, 5, 5), bool), np.arange(8) % 2)
    task = PropertyTraining(
        a, "mean", TrainOptions(epochs=4, batch_size=4, hidden=8, layers=1), 0, torch.device("cpu"),
        strategy=Strategy("finetune_perturb", finetune_share=0.25), more_train=(b,),
    )  # fmt: skip
    assert [task.active_sets(e) for e in range(1, 5)] == [[0], [0], [0], [1]]
    assert trained_by("finetune_perturb") == {"sensitivity": "generalisation"}
    assert trained_by("standard") == trained_by("adversarial") == {"robustness": "generalisation"}


def test_flips_change_one_or_two_cells() -> None:
    rng = np.random.default_rng(0)
    a = np.random.default_rng(1).random((200, 6, 6)) < 0.5
    flipped = flip_cells(a, rng)
    changed = (flipped != a).reshape(200, -1).sum(axis=1)
    assert set(changed) == {1, 2} and 60 < (changed == 2).sum() < 140


def test_adversarial_labels_come_from_the_checker_not_from_the_original() -> None:
    prop = get_property("symmetric")
    rng = np.random.default_rng(0)
    base = np.zeros((50, 5, 5), bool)  # the empty relation is symmetric; one flip off the diagonal breaks it
    flipped, labels = adversarial_batch(base, 0.5, prop, rng)
    assert len(flipped) == 25
    np.testing.assert_array_equal(labels, prop(flipped))
    assert labels.any() and not labels.all()  # diagonal flips stay symmetric, off-diagonal ones do not


def test_adversarial_training_feeds_the_checkers_labels(tmp_path: Path) -> None:
    prop = get_property("irreflexive")
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    def check(a: np.ndarray) -> np.ndarray:
        out = prop(a)
        seen.append((a.copy(), out))
        return out

    train = LabelledGraphs(5, np.zeros((8, 5, 5), bool), np.ones(8, np.uint8))
    task = PropertyTraining(
        train, "mean", TrainOptions(epochs=1, batch_size=4, hidden=8, layers=1), 0, torch.device("cpu"),
        strategy=Strategy("adversarial", adversarial_share=0.5), check=check,
    )  # fmt: skip
    fed: list[torch.Tensor] = []
    original = task.model.forward
    task.model.forward = lambda adj: (fed.append(adj.clone()), original(adj))[1]  # type: ignore[method-assign]
    from engine.loop import TrainState, run_epoch

    state = TrainState()
    run_epoch(task, state, lambda: False)
    assert len(seen) == 2 and all(len(a) == 2 for a, _ in seen)  # two batches of 4, half flipped
    assert [len(x) for x in fed] == [6, 6]
    for (a, labels), batch in zip(seen, fed, strict=True):
        assert torch.equal(batch[4:], torch.as_tensor(a))
        np.testing.assert_array_equal(labels, ~np.any(np.diagonal(a, axis1=1, axis2=2), axis=1))
    with pytest.raises(GaptuiError, match="needs the property's checker"):
        PropertyTraining(train, "mean", OPTIONS, 0, torch.device("cpu"), strategy=Strategy("adversarial"))


@pytest.mark.parametrize("strategy", ["finetune_perturb", "progressive", "adversarial"])
def test_each_strategy_trains_and_tests_a_cell(strategy: str, tmp_path: Path) -> None:
    ckpt = tmp_path / "gen" / "checkpoint.pt"
    ckpt.parent.mkdir()
    events: list[str] = []
    cell = {**TINY, "datasets_dir": tmp_path, "strategy": Strategy(strategy)}
    gen = run_cell("symmetric", "mean", "generalisation", 0, OPTIONS, _kinds(events), checkpoint=ckpt, **cell)
    assert events == ["start", "epoch", "epoch", "epoch", "eval"] and 0 <= gen["u_score"] <= 1
    tested = sorted(int(k[5:]) for k in gen if k.startswith("acc_n"))
    assert tested == ([8, 9] if strategy == "progressive" else [6, 7, 8, 9])
    if strategy == "progressive":
        assert gen["train_n"] == 5 and gen["train_n_max"] == 7
    other = "sensitivity" if strategy == "finetune_perturb" else "robustness"
    events.clear()
    out = run_cell("symmetric", "mean", other, 0, OPTIONS, _kinds(events), trained=ckpt, **cell)
    assert events == ["start", "eval"] and set(out) == set(gen)


def test_a_preset_lists_strategies_and_finetune_has_no_robustness(tmp_path: Path) -> None:
    from engine.properties.preset import parse_preset

    fam = FAMILIES.get("properties")
    raw = {
        "task": "properties", "name": "s", "description": "d", "properties": ["symmetric"], "poolings": ["mean"],
        "seeds": [0], "strategies": ["standard", "finetune_perturb", "progressive"], "run": {"sizes": 4},
    }  # fmt: skip
    preset = parse_preset(raw)
    specs = fam.grid(preset, Placement(str(tmp_path), str(tmp_path)))
    got = [(s.strategy, s.dimension) for s in specs]
    assert got == [
        ("standard", "generalisation"), ("standard", "sensitivity"), ("standard", "robustness"),
        ("finetune_perturb", "generalisation"), ("finetune_perturb", "sensitivity"),
        ("progressive", "generalisation"), ("progressive", "sensitivity"), ("progressive", "robustness"),
    ]  # fmt: skip
    assert preset.size == len(specs) and any("no robustness cells" in n for n in preset.notes)
    sens = specs[4]
    assert fam.dependencies(sens) == (specs[3].hash(),)
    assert fam.record_axes(sens)["pooling"] == "mean/finetune_perturb"
    plain = parse_preset({k: v for k, v in raw.items() if k != "strategies"})
    assert [s.hash() for s in fam.grid(plain, Placement(str(tmp_path), str(tmp_path)))] == [s.hash() for s in specs[:3]]
    with pytest.raises(GaptuiError, match="did you mean 'adversarial'"):
        parse_preset({**raw, "strategies": ["adversarail"]})


def test_the_form_writes_strategies_only_when_not_the_default() -> None:
    from engine.properties.form import form_values, preset_from_form

    values = {"properties": ["symmetric"], "poolings": ["mean"], "dimensions": ["generalisation"], "seeds": [0]}
    assert "strategies" not in preset_from_form({**values, "strategies": ["standard"]})
    doc = preset_from_form({**values, "strategies": ["standard", "adversarial"]})
    assert doc["strategies"] == ["standard", "adversarial"]
    assert form_values(doc)["strategies"] == ["standard", "adversarial"]
    assert form_values(preset_from_form(values))["strategies"] == ["standard"]
