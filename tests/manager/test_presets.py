"""Presets: the shipped ones, validation of bad ones (through the CLI, as users meet it), TOML round trip."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine.alignment.preset import dump_preset
from gaptui.presets import grid, load_preset, parse_preset
from gaptui.workspace import Workspace
from tests.support.cli import run_cli

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def test_shipped_presets() -> None:
    ws = Workspace(Path("/tmp/unused"))
    smoke, quick, paper = (load_preset(n) for n in ("smoke", "quick", "paper"))
    assert smoke.size == len(grid(smoke, ws)) == 4
    assert quick.size == len(grid(quick, ws)) == 3 * 5 * 2 + 3
    # Table D.3: 5 datasets x 8 noise levels x 5 models x 10 seeds, + the baseline per (dataset, noise)
    assert paper.size == 5 * 8 * 5 * 10 + 5 * 8
    specs = grid(paper, ws)
    assert len({s.hash() for s in specs}) == len(specs) == 2040
    # the paper's "GatedGCN" is ggnn with two propagation steps (Table C.2: width 48, 59,680 parameters)
    assert {s.model for s in specs} == {"gcn", "gin", "ggnn", "gat", "gatv2", "laplacian"}
    assert {s.model_kwargs.get("steps") for s in specs if s.model == "ggnn"} == {2}
    assert sorted({s.dataset["noise"] for s in specs}) == [0.04, 0.06, 0.08, 0.12, 0.15, 0.18, 0.24, 0.3]
    assert all(s.epochs == 300 for s in specs)
    # seed-major: the first 205 runs cover every (dataset, noise, model) cell once
    first = specs[: 5 * 8 * 6]
    assert {s.seed for s in first if s.model != "laplacian"} == {0}


def test_round_trip_through_toml() -> None:
    quick = load_preset("quick")
    again = parse_preset(tomllib.loads(dump_preset(quick)))
    assert dataclasses.replace(again, path=None) == dataclasses.replace(quick, path=None)


def test_model_options_reach_every_run_of_their_model() -> None:
    from engine.tasks import FAMILIES

    text = BASE.replace('["gcn"]', '["gcn", "GGNN"]').replace("seeds = [0]", "seeds = [0, 1]")
    preset = parse_preset(tomllib.loads(text + "[model_options]\nggnn = { steps = 2 }\n"))
    assert preset.model_options == {"ggnn": {"steps": 2}}
    specs = grid(preset, Workspace(Path("/tmp/unused")))
    assert {(s.model, s.seed): s.model_kwargs for s in specs} == {
        ("gcn", 0): {},
        ("gcn", 1): {},
        ("ggnn", 0): {"steps": 2},
        ("ggnn", 1): {"steps": 2},
    }
    family = FAMILIES.get("alignment")
    assert {family.record_axes(s)["model"] for s in specs} == {"gcn", "ggnn[steps=2]"}
    again = parse_preset(tomllib.loads(dump_preset(preset)))
    assert dataclasses.replace(again, path=None) == dataclasses.replace(preset, path=None)


BASE = """
noise = [0.1]
models = ["gcn"]
seeds = [0]
[[datasets]]
base = "er"
"""


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("text", "needles"),
    [
        (BASE.replace("models", "modles"), ["unknown key 'modles'", "did you mean 'models'?"]),
        (BASE.replace('["gcn"]', '["gcnn"]'), ["key 'models' value 'gcnn'", "did you mean 'gcn'?"]),
        (BASE.replace('"er"', '"err"'), ["datasets[0]", "unknown base dataset 'err'", "did you mean 'er'?"]),
        (BASE.replace("[0.1]", "[1.5]"), ["key 'noise' value", "[0, 1)"]),
        (BASE.replace("[0.1]", "[]"), ["key 'noise' is empty"]),
        (BASE.replace("seeds = [0]", 'seeds = ["a"]'), ["key 'seeds' holds 'a'", "integer seeds"]),
        (BASE + '[run]\nepochs = "many"\n', ["[run]", "key 'epochs' = 'many'", "expected an integer"]),
        (BASE + "[run]\nepoch = 3\n", ["[run]", "unknown key 'epoch'", "did you mean 'epochs'?"]),
        (BASE + "params = { degre = 3 }\n", ["datasets[0]", "no parameter 'degre'", "did you mean 'degree'?"]),
        ("noise = [0.1\n", ["not valid TOML"]),
        (BASE + "[model_options]\ngatv2 = { heads = 4 }\n", ["[model_options]", "'gatv2' is not one of", "gcn"]),
        (BASE + "[model_options]\ngcn = 3\n", ["[model_options]", "key 'gcn' = 3", "expected a table of options"]),
        (
            BASE + "[model_options]\ngcn = { layrs = 3 }\n",
            ["[model_options] value 'gcn'", "no option 'layrs'", "did you mean 'layers'?"],
        ),
    ],
)
def test_bad_presets_exit_2_naming_file_key_value(tmp_path: Path, text: str, needles: list[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    res = run_cli("run", "--preset", str(path), "--dry-run", "--workspace", str(tmp_path / "ws"))
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert str(path) in lines[0]
    for needle in needles:
        assert needle in lines[0]
    assert not (tmp_path / "ws").exists()  # nothing written for a bad preset


@pytest.mark.e2e
def test_unknown_preset_name(tmp_path: Path) -> None:
    res = run_cli("run", "--preset", "smok", "--dry-run", "--workspace", str(tmp_path))
    assert res.returncode == 2 and "did you mean 'smoke'?" in res.stderr


@pytest.mark.e2e
def test_dry_run_lists_the_plan(tmp_path: Path) -> None:
    res = run_cli(
        "run", "--preset", "quick", "--dry-run", "--no-estimate", "--workspace", str(tmp_path), "--cpu-jobs", "2"
    )
    assert res.returncode == 0, res.stderr
    assert "33 runs" in res.stdout and "to run 33" in res.stdout and "cpu#1" in res.stdout
    assert "estimate" not in res.stdout  # --no-estimate: no calibration either


def test_a_grids_later_seeds_are_the_runs_their_specs_parse_to() -> None:
    """Later seeds are derived from the first seed's spec (not parsed again): each must be the run its own dict
    form parses to, with the same identity, dict form and cell key, and keep only caches that ignore the seed."""
    from engine.alignment.spec import RunSpec

    text = BASE.replace('["gcn"]', '["gcn", "gat+rwpe:8"]').replace("seeds = [0]", "seeds = [0, 7, 123456789]")
    preset = parse_preset(tomllib.loads(text + "[model_options]\ngcn = { layers = 3 }\n"))
    specs = [*grid(preset, Workspace(Path("/tmp/unused"))), *grid(load_preset("quick"), Workspace(Path("/w")))]
    assert {s.seed for s in specs} >= {0, 7, 123456789}
    for spec in specs:
        parsed = RunSpec.from_dict(spec.to_dict())
        assert (spec.hash(), spec.to_dict(), spec.seedless()) == (parsed.hash(), parsed.to_dict(), parsed.seedless())
        assert spec.canonical() == parsed.canonical()
    first, later = (next(s for s in specs if s.model == "gcn" and s.seed == seed) for seed in (0, 7))
    assert later.dataset_spec() is first.dataset_spec()  # a SEED_FREE cache: shared
    assert later.seedless() == first.seedless() and later.hash() != first.hash()
    assert later.canonical()["seed"] == 7 and first.canonical()["seed"] == 0


def test_runs_of_one_cell_are_asked_their_memory_once(monkeypatch) -> None:
    from engine.memory import memory_needs
    from engine.tasks import FAMILIES

    costs = FAMILIES.get("alignment").costs
    asked = []
    real = costs.memory
    monkeypatch.setattr(costs, "memory", lambda spec: asked.append(spec.seed) or real(spec))
    text = BASE.replace('["gcn"]', '["gcn", "gin"]').replace("seeds = [0]", "seeds = [0, 1, 2]")
    specs = grid(parse_preset(tomllib.loads(text)), Workspace(Path("/tmp/unused")))
    needs = memory_needs(specs)
    assert len(specs) == 6 and asked == [0, 0]  # gcn and gin, each asked for its first seed only
    assert len(needs) == 2  # one dataset and batch, but each model holds its own tensors in a step


def test_a_reseeded_spec_hashes_as_its_own_canonical_form_whatever_keys_surround_the_seed() -> None:
    """The derived hash joins the canonical JSON around the seed: keys on both sides of it, after it only, before it
    only, none, and a canonical form without a seed (the copy is then made by ``replace``)."""
    from dataclasses import dataclass

    from engine.tasks.spec import TaskSpec

    @dataclass(frozen=True)
    class Around(TaskSpec):
        alpha: float = 0.5
        task: str = "a"
        seed: int = 0

    @dataclass(frozen=True)
    class After(TaskSpec):
        seed: int = 0
        zeta: list = dataclasses.field(default_factory=lambda: [1, {"b": 2}])
        task: str = "z"

    @dataclass(frozen=True)
    class Before(TaskSpec):
        alpha: str = "x"
        task: str = "b"
        seed: int = 0

        def canonical(self) -> dict:
            return {"alpha": self.alpha, "seed": self.seed}

    @dataclass(frozen=True)
    class Alone(TaskSpec):
        task: str = "s"
        seed: int = 0

        def canonical(self) -> dict:
            return {"seed": self.seed}

    @dataclass(frozen=True)
    class Unseeded(TaskSpec):
        task: str = "u"
        seed: int = 0

        def canonical(self) -> dict:
            return {"task": self.task}

    for spec in (Around(), After(), Before(), Alone(), Unseeded()):
        for seed in (1, 0, 2**40):
            derived = spec.reseeded(seed)
            assert derived.seed == seed and derived == spec.replace(seed=seed)
            assert derived.hash() == spec.replace(seed=seed).hash()
            assert derived.seedless() == spec.seedless()
    assert Around().reseeded(3).hash() != Around().hash() and Unseeded().reseeded(3).hash() == Unseeded().hash()
