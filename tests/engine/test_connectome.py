"""The ``connectome`` base: graspologic's mouse connectomes paired across individuals, read from files laid out as the
graspologic wheel lays them out (a small fixture: CI does not install graspologic)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.alignment.datasets import DatasetSpec, build_dataset
from engine.errors import GaptuiError
from engine.sources import SOURCES, parse_params
from engine.sources.connectome import chosen_mice, ordered_pairs, read_participants, split_mice
from tests.support.cli import run_cli
from tests.support.packages import fake_distribution, hidden_distributions
from tests.support.sources import GENOTYPES, NODES, write_mice


@pytest.fixture
def mice(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    folder = tmp_path / "mice"
    return folder, write_mice(folder)


def source(**params: object):
    cls = SOURCES.get("connectome")
    return cls(parse_params(cls, {k: str(v) for k, v in params.items()}))


def test_pairs_are_two_mice_on_the_same_atlas_split_by_mouse(mice) -> None:
    folder, weights = mice
    splits = source(path=folder, val_subjects=4).load(None, None, np.random.default_rng(0), folder)
    assert splits.partners is not None
    # 8 mice: 4 held out for validation, spread over the 3 genotypes (drawn from split_seed, not the dataset's rng)
    train_mice, val_mice = split_mice(read_participants(folder), 4, np.random.default_rng(0))
    assert len(val_mice) == 4 and {m.genotype for m in val_mice} == set(GENOTYPES)
    assert len(splits.train) == len(ordered_pairs(train_mice, "within"))
    assert len(splits.val) == len(ordered_pairs(val_mice, "within"))
    genotypes = {m.subject: m.genotype for m in train_mice + val_mice}
    for split, held in (("train", train_mice), ("val", val_mice)):
        bases = getattr(splits, split)
        for g, h in zip(bases, splits.partners[split], strict=True):
            a, b = _whose(g, weights), _whose(h, weights)
            assert a != b and genotypes[a] == genotypes[b] and g.num_nodes == h.num_nodes == NODES
            assert {a, b} <= {m.subject for m in held}  # no mouse in both splits
    assert "4 training and 4 validation mice" in splits.report.notes[0]
    across = source(path=folder, val_subjects=4, pairing="across").load(None, None, np.random.default_rng(0), folder)
    assert len(across.train) == len(ordered_pairs(train_mice, "across")) > 0


def _whose(graph, weights: dict[str, np.ndarray]) -> str:
    """The subject whose strongest 10% of node pairs (the default density) are this graph's edges."""
    keep = int(round(0.1 * NODES * (NODES - 1) / 2))
    iu = np.triu_indices(NODES, 1)
    mine = {tuple(e) for e in graph.edges.tolist()}
    for subject, w in weights.items():
        order = np.argsort(-w[iu], kind="stable")[:keep]
        if {(int(iu[0][i]), int(iu[1][i])) for i in order} == mine:
            return subject
    raise AssertionError("no subject has these edges")


def test_density_threshold_and_every_edge(mice) -> None:
    folder, weights = mice
    first = next(iter(weights))
    upper = np.triu(weights[first], 1)
    for params, count in (
        ({"density": 0.2}, round(0.2 * NODES * (NODES - 1) / 2)),
        ({"density": 0, "threshold": 150}, int((upper >= 150).sum())),
        ({"density": 0}, int((upper > 0).sum())),  # every listed edge, unweighted
    ):
        src = source(path=folder, subjects=f"{first},54777", **params)
        mice_chosen = chosen_mice(src.params, folder)
        assert [m.subject for m in mice_chosen] == [first, "sub-54777"]
        assert src.graphs(folder, mice_chosen)[0].num_edges == count, params


def test_a_dataset_of_real_pairs_is_relabelled_and_counts_the_real_noise(mice, tmp_path: Path, monkeypatch) -> None:
    # The folder's path is part of the dataset's identity, hence of its seeds: one relative path, so the noise
    # drawn below is the same on every run of the test (a few small graphs realise it loosely).
    monkeypatch.chdir(tmp_path)
    folder = Path(mice[0].name)
    spec = DatasetSpec("connectome", 0.0, seed=1, params={"path": str(folder), "val_subjects": "4"})
    dataset, _ = build_dataset(spec, tmp_path / "ds")
    train = dataset.split("train")
    n, g, h, perm = train.pair(0)
    assert not np.array_equal(perm, np.arange(n))  # randomly relabelled
    stats = dataset.stats["train"]
    assert 0 < stats["removed_fraction"] < 1 and stats["pairs"] == len(train)
    # partner=self: the same base graphs, each noised by --noise instead of paired with another mouse
    synthetic, _ = build_dataset(
        DatasetSpec("connectome", 0.2, seed=1, params={"path": str(folder), "val_subjects": "4", "partner": "self"}),
        tmp_path / "ds",
    )
    again = synthetic.split("train")
    assert np.array_equal(again.num_nodes, train.num_nodes) and np.array_equal(again.edge_index_g, train.edge_index_g)
    # the realised synthetic noise is close to --noise
    assert synthetic.stats["train"]["removed_fraction"] == pytest.approx(0.2, abs=0.1)
    # every mouse for training leaves no validation pair: refused in one line, no metric-less runs
    with pytest.raises(GaptuiError, match="has no validation pair"):
        every = {"path": str(folder), "val_subjects": "0", "partner": "self"}
        build_dataset(DatasetSpec("connectome", 0.2, seed=1, params=every), tmp_path / "ds")


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"subjects": "54776,99999"}, "no subject 'sub-99999' in"),
        ({"genotypes": "B7"}, "no genotype 'B7' in"),
        ({"pairing": "whithin"}, "--param pairing=whithin (connectome): expected one of within, across, any"),
        ({"threshold": 10}, "and density=0 with it"),
        ({"density": 1.5}, "--param density=1.5 (connectome): expected a share in [0, 1)"),
    ],
)
def test_bad_parameters_are_one_line(mice, params: dict, expected: str) -> None:
    folder, _ = mice
    with pytest.raises(GaptuiError, match=expected.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        source(path=folder, **params).check_files(folder)


@pytest.mark.e2e
def test_a_mouse_that_does_not_exist_is_refused_on_the_command_line(mice, tmp_path: Path) -> None:
    folder, _ = mice
    res = run_cli(
        "datasets", "build", "connectome", "--noise", "0", "-w", str(tmp_path / "ws"),
        "-p", f"path={folder}", "-p", "subjects=54776,54900",
    )  # fmt: skip
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("error: connectome: --param subjects: no subject 'sub-54900' in")
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.e2e
def test_without_graspologic_the_line_says_what_to_install(tmp_path: Path) -> None:
    env = hidden_distributions(tmp_path, "graspologic")
    res = run_cli("datasets", "build", "connectome", "--noise", "0", "-w", str(tmp_path / "ws"), env=env)
    assert res.returncode == 2
    line = res.stderr.strip()
    assert line.startswith("error: connectome reads the data files of the graspologic package, which is not installed")
    assert "pip install 'gaptui[connectome]'" in line and "pip install --no-deps graspologic==3.4.4" in line


@pytest.mark.e2e
def test_the_installed_graspologic_data_is_found_without_importing_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    write_mice(site / "graspologic" / "datasets" / "mice")
    (site / "graspologic" / "__init__.py").write_text("raise ImportError('graspologic must not be imported')\n")
    fake_distribution(site, "graspologic", "3.4.4")
    res = run_cli(
        "datasets", "build", "connectome", "--noise", "0", "-w", str(tmp_path / "ws"), "-p", "val_subjects=4",
        "--json", env={"PYTHONPATH": str(site)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["spec"]["base"] == "connectome" and doc["stats"]["train"]["pairs"] > 0
    assert any(key.endswith("files of graspologic/datasets/mice") for key in doc["stats"]["val"]["source_files"])


def test_the_pair_count_is_known_before_any_edge_list_is_read(mice) -> None:
    folder, _ = mice
    cls = SOURCES.get("connectome")
    params = parse_params(cls, {"path": str(folder), "val_subjects": "4"})
    splits = source(path=folder, val_subjects=4).load(None, None, np.random.default_rng(0), folder)
    assert cls.count_hint(params) == len(splits.train) + len(splits.val)
    assert cls.count_hint(parse_params(cls, {"path": str(folder / "nowhere")})) is None
