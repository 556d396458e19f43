"""Property suite data: checkers, solver sampling, GraphRandom / GraphPerturb datasets and their cache."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.errors import GaptuiError
from engine.properties.datasets import (
    PropertyDatasetSpec,
    build_property_dataset,
    density_accuracy,
    flip_priority,
    pack,
    unpack,
)
from engine.properties.definitions import BASE_SIZES, PROPERTIES, PROPERTY_NAMES, get_property, suite_sizes
from engine.properties.sat import RelationSampler


def m(rows: str) -> np.ndarray:
    """A matrix from rows of 0/1 separated by spaces: ``m("01 10")``."""
    return np.array([[c == "1" for c in row] for row in rows.split()], dtype=bool)


# (property, matrix, expected) triples written by hand.
CASES = [
    ("reflexive", "11 11", True),
    ("reflexive", "10 01", True),
    ("reflexive", "10 00", False),  # one self-loop missing
    ("reflexive", "01 10", False),
    ("irreflexive", "01 10", True),
    ("irreflexive", "00 00", True),
    ("irreflexive", "01 11", False),  # a single self-loop breaks it
    ("symmetric", "011 101 110", True),
    ("symmetric", "010 000 000", False),
    ("symmetric", "100 000 000", True),  # self-loops never break symmetry
    ("antisymmetric", "110 011 001", True),
    ("antisymmetric", "011 101 000", False),
    ("antisymmetric", "100 010 001", True),
    ("transitive", "011 001 000", True),
    ("transitive", "010 001 000", False),  # 0 -> 1 -> 2 without 0 -> 2
    ("transitive", "010 100 000", False),  # 0 -> 1 -> 0 needs the self-loop 0 -> 0
    ("transitive", "110 110 000", True),
    ("connex", "11 01", True),
    ("connex", "01 10", False),  # both directions between 0 and 1 but no self-loops
    ("connex", "01 11", False),  # node 0 lacks its self-loop
    ("connex", "111 011 001", True),
    ("connex", "110 010 001", False),  # 0 and 2 unrelated
    ("functional", "010 000 100", True),
    ("functional", "011 000 000", False),
    ("function", "010 001 100", True),
    ("function", "010 000 100", False),  # node 1 has no successor
    ("injective", "010 000 001", True),
    ("injective", "010 010 000", False),  # node 1 has two predecessors
    ("surjective", "110 001 000", True),
    ("surjective", "110 100 000", False),  # node 2 has no predecessor
    ("bijective", "010 100 001", True),
    ("bijective", "011 000 100", True),  # exactly one predecessor each, successors unconstrained (Alloy)
    ("bijective", "011 001 100", False),
    ("equivalence", "110 110 001", True),
    ("equivalence", "110 010 001", False),
    ("preorder", "111 111 001", True),
    ("preorder", "011 001 000", False),
    ("partial_order", "111 011 001", True),
    ("partial_order", "110 110 001", False),
    ("partial_order", "101 010 001", True),
    ("total_order", "111 011 001", True),
    ("total_order", "101 010 001", False),
    ("strict_order", "011 001 000", True),
    ("strict_order", "111 001 000", False),
    ("strict_order", "000 000 000", True),
]


@pytest.mark.parametrize(("name", "rows", "expected"), CASES)
def test_checker_on_hand_made_matrices(name: str, rows: str, expected: bool) -> None:
    assert bool(get_property(name)(m(rows))) is expected


def test_every_property_has_hand_made_cases_both_ways() -> None:
    for name in PROPERTY_NAMES:
        assert {e for p, _, e in CASES if p == name} == {True, False}, name


def _all_relations(n: int) -> np.ndarray:
    bits = np.array(list(itertools.product([False, True], repeat=n * n)), dtype=bool)
    return bits.reshape(-1, n, n)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_checkers_count_the_known_number_of_labelled_relations(n: int) -> None:
    everything = _all_relations(n)
    for name, prop in PROPERTIES.items():
        assert int(prop(everything).sum()) == prop.count(n), (name, n)


def test_batched_checkers_agree_with_single_graphs() -> None:
    graphs = _all_relations(3)[::7]
    for prop in PROPERTIES.values():
        assert list(prop(graphs)) == [bool(prop(g)) for g in graphs]


def test_base_size_is_the_smallest_size_with_enough_positives() -> None:
    for name, base in BASE_SIZES.items():
        prop = get_property(name)
        assert prop.count(base) >= 20_000 > prop.count(base - 1), name
        sizes = suite_sizes(name)
        assert sizes[0] == base and len(sizes) == 11 and sizes[-1] <= 30


def test_unknown_property_suggests_the_closest() -> None:
    with pytest.raises(GaptuiError, match="did you mean 'transitive'"):
        get_property("transitiv")


@pytest.mark.parametrize("name", PROPERTY_NAMES)
def test_solver_samples_satisfy_and_negated_samples_violate(name: str) -> None:
    rng = np.random.default_rng(1)
    prop = get_property(name)
    n = BASE_SIZES[name]
    with RelationSampler(name, n) as pos, RelationSampler(name, n, negate=True) as neg:
        assert all(bool(prop(pos.sample(rng))) for _ in range(30))
        assert not any(bool(prop(neg.sample(rng))) for _ in range(30))


@pytest.mark.parametrize("name", ["function", "bijective"])
def test_random_phases_on_auxiliaries_give_diverse_positives(name: str) -> None:
    rng = np.random.default_rng(7)
    with RelationSampler(name, 6) as sampler:
        graphs = {sampler.sample(rng).tobytes() for _ in range(200)}
    assert len(graphs) >= 150


def test_pack_round_trip() -> None:
    a = np.random.default_rng(0).random((5, 7, 7)) < 0.3
    assert np.array_equal(unpack(pack(a), 7), a)


def _check_dataset(ds, name: str, n: int) -> np.ndarray:  # noqa: ANN001 - a PropertyDataset
    adj, label = ds.adjacency(), ds.labels()
    prop = get_property(name)
    assert adj.shape == (ds.spec["graphs"], n, n)
    assert int(label.sum()) * 2 == len(label)  # 50/50 balance
    assert np.array_equal(prop(adj), label.astype(bool))  # positives satisfy, negatives violate
    assert len({g.tobytes() for g in adj}) == len(adj)  # no duplicates
    return adj


@pytest.mark.parametrize("negatives", ["solver", "random"])
@pytest.mark.parametrize("name", ["function", "transitive", "reflexive"])
def test_graph_random_dataset(tmp_path, name: str, negatives: str) -> None:  # noqa: ANN001
    n = BASE_SIZES[name]
    ds, built = build_property_dataset(PropertyDatasetSpec(name, n, "random", 400, negatives), tmp_path)
    assert built
    _check_dataset(ds, name, n)
    assert (ds.array("source") == -1).all() and (ds.array("flips") == 0).all()


@pytest.mark.parametrize("name", ["surjective", "connex", "equivalence", "function"])
def test_graph_perturb_negatives_are_one_or_two_flips_from_their_positive(tmp_path, name: str) -> None:  # noqa: ANN001
    n = BASE_SIZES[name]
    ds, _ = build_property_dataset(PropertyDatasetSpec(name, n, "perturb", 400), tmp_path)
    adj = _check_dataset(ds, name, n)
    label, source, flips = ds.labels(), ds.array("source"), ds.array("flips")
    negatives = np.flatnonzero(label == 0)
    assert (source[label == 1] == -1).all()
    assert sorted(source[negatives]) == sorted(np.flatnonzero(label == 1))  # one negative per positive
    distance = (adj[negatives] != adj[source[negatives]]).sum(axis=(1, 2))
    assert set(distance) <= {1, 2} and np.array_equal(distance, flips[negatives])
    assert ds.stats["one_flip"] + ds.stats["two_flips"] == len(negatives)


def test_surjective_positives_without_a_near_violation_are_resampled(tmp_path) -> None:  # noqa: ANN001
    ds, _ = build_property_dataset(PropertyDatasetSpec("surjective", 4, "perturb", 600), tmp_path)
    # Many 4-node surjective relations have every in-degree >= 3: they cannot be broken by two flips.
    assert ds.stats["resampled"] > 0


def test_flip_priority_puts_unusual_nodes_first() -> None:
    a = np.zeros((6, 6), dtype=bool)
    a[np.arange(6), (np.arange(6) + 1) % 6] = True  # a directed cycle: every degree is 1
    a[2, :] = True  # node 2 has out-degree 6
    first = flip_priority(a, np.random.default_rng(0))[:6]
    assert all(2 in divmod(int(c), 6) for c in first)


def test_density_accuracy() -> None:
    label = np.array([0, 0, 1, 1])
    assert density_accuracy(np.array([0.1, 0.2, 0.8, 0.9]), label) == 1.0
    assert density_accuracy(np.array([0.9, 0.8, 0.1, 0.2]), label) == 1.0  # either direction
    assert density_accuracy(np.array([0.5, 0.5, 0.5, 0.5]), label) == 0.5


def test_cache_is_content_addressed_and_seeded(tmp_path) -> None:  # noqa: ANN001
    spec = PropertyDatasetSpec("symmetric", 5, "perturb", 100, seed=3)
    a, built_a = build_property_dataset(spec, tmp_path)
    b, built_b = build_property_dataset(spec, tmp_path)
    assert built_a and not built_b and a.path == b.path
    again, _ = build_property_dataset(spec, tmp_path / "elsewhere")
    for name in ("bits", "label", "source", "flips"):
        assert np.array_equal(a.array(name), again.array(name))
    other, _ = build_property_dataset(PropertyDatasetSpec("symmetric", 5, "perturb", 100, seed=4), tmp_path)
    assert other.id != a.id and not np.array_equal(other.array("bits"), a.array("bits"))
    assert not [p for p in (tmp_path / "properties").iterdir() if p.name.startswith(".")]


def test_too_few_distinct_positives_is_a_clear_error(tmp_path) -> None:  # noqa: ANN001
    # Only 2! = 2 total orders exist on 2 nodes.
    with pytest.raises(GaptuiError, match="only 2 distinct positives.*base size is 8"):
        build_property_dataset(PropertyDatasetSpec("total_order", 2, "random", 10), tmp_path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"family": "noisy"}, "unknown dataset family 'noisy'"),
        ({"graphs": 7}, "graphs = 7: expected an even count"),
        ({"n": 31}, "n = 31: expected a size between 1 and 30"),
        ({"negatives": "solve"}, "did you mean 'solver'"),
    ],
)
def test_bad_specs_name_the_culprit(changes: dict, message: str) -> None:
    fields = {"property": "reflexive", "n": 5, **changes}
    with pytest.raises(GaptuiError, match=message):
        PropertyDatasetSpec(**fields).canonical()


def test_random_negatives_exist_for_properties_that_fair_coins_rarely_violate(tmp_path) -> None:  # noqa: ANN001
    # A fair coin per cell gives a 14-node relation an empty column with probability ~ 14 / 2**14.
    ds, _ = build_property_dataset(PropertyDatasetSpec("surjective", 14, "random", 100, "random"), tmp_path)
    _check_dataset(ds, "surjective", 14)
