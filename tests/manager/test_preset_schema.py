"""The preset schema shared by every family: shipped presets expand to the run ids they always did."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from engine.errors import GaptuiError
from engine.tasks import FAMILIES
from gaptui.presets import BUNDLED, grid, load_preset
from gaptui.workspace import Workspace
from tests.support import ROOT

#: Per shipped preset: (runs, SHA-256 of its sorted run ids). A change here changes the identity of published runs.
#: `paper` names the `paper` recipe, whose values are the three options it spelled out before recipes: its ids
#: are those it always had. `quick` and `smoke` follow the default recipe, so they changed when the default
#: became `gaptui` (docs/fidelity.md); runs filed before keep their ids and read as recipe `legacy`.
SHIPPED_RUN_IDS = {
    "brec": (994, "6bfed1083398f6e88c9d3d34476dad6658d3d95fcbf6f71b5e6e54d9428f20d1"),
    "brec-smoke": (35, "5ec2bbbaf6970f8fa646fd1cc55c256aaf2a05102813bde44bf6139258545337"),
    "gape-smoke": (8, "b8993daac0782aaa1e755244162c659eb55b9a03401e88d5a363e0603e29ca73"),
    "gape": (87, "4161b4c0dab4f006a7afbcea0a8292ae82df17b26b5a18920dc94e3597cfa725"),
    # paper: its GatedGCN rows run ggnn with steps = 2, the model Table D.3 trained (not gatedgcn).
    "paper": (2040, "170223baacf37b7ff2434d4208f13251668f33e7cf7b6b4d6a37a78fe3da11bd"),
    "properties-strategies": (297, "35f2863b4c836ab1d4366f98fe05b90922102425308fe3d597c9e369c56bea20"),
    "properties-smoke": (18, "71c2fe4afe495edac32532f09c6bce21beaacbddc9d3802a57e6ca77edc83fe7"),
    "properties": (2400, "3e19bf0aa7af7b02e5847e874a32b0077d361c1498ea211e4e62e669d6c2f64e"),
    "quick": (33, "dfa6af5c9c719909438e1e3ab3a6f66c6c1577232e1fab0c7d597bcc304159bc"),
    "smoke": (4, "5e3de54513ce9d4d168bf7bbf30462e7565cbba2e5da4eadd54a8c2d5e1a9813"),
    "solvers": (40, "99b15c11e2320d40b86710bb22159eacd43ead866eda2bf2efd6eb62926e1d48"),
    "zoo": (172, "57c3d31eb02b886880a5010f3eb921eaff0a4724350ebd630b082b1eae75ed7c"),
    "zoo-smoke": (43, "f15947f9fd341fec8da3f856726377e12fb2641792079c27e951fee2596b4da5"),
    "zoo-cpu": (86, "3f019fd0d6fe032241055d91415309a8765bbf812ec45b93759bf9bcfcf9100a"),
}
#: The run policy a shipped preset sets, where it is not the default (timeout, retries, pack_seeds).
SHIPPED_POLICY = {
    "zoo-smoke": (None, 0, 3),
    "properties-strategies": (None, 0, 3),
    "brec": (None, 0, 10),
    "brec-smoke": (None, 0, 2),
}
REPO_PRESETS = ROOT / "presets"


def test_every_shipped_preset_is_pinned() -> None:
    assert sorted(p.stem for p in BUNDLED.glob("*.toml")) == sorted(SHIPPED_RUN_IDS)
    for path in REPO_PRESETS.glob("*.toml"):
        assert path.read_bytes() == (BUNDLED / path.name).read_bytes(), f"{path} differs from the shipped copy"


@pytest.mark.parametrize("name", sorted(SHIPPED_RUN_IDS))
def test_shipped_preset_expands_to_the_same_run_ids(name: str) -> None:
    preset = load_preset(name)
    ids = sorted(spec.hash() for spec in grid(preset, Workspace(Path("/tmp/unused"))))
    assert (len(ids), hashlib.sha256("\n".join(ids).encode()).hexdigest()) == SHIPPED_RUN_IDS[name]
    assert (preset.timeout, preset.retries, preset.pack_seeds) == SHIPPED_POLICY.get(name, (None, 0, 1))


def test_the_properties_preset_keeps_its_2160_ids_beside_the_hybrid_runs() -> None:
    # Adding the hybrid pooling (the property benchmark, section 4.3) added 240 runs; the 2,160 of the nine poolings
    # are unchanged.
    specs = grid(load_preset("properties"), Workspace(Path("/tmp/unused")))
    old = sorted(spec.hash() for spec in specs if spec.pooling != "hybrid")
    digest = hashlib.sha256("\n".join(old).encode()).hexdigest()
    assert (len(old), digest) == (2160, "f3954770e406a89382e3bb88409fb1c715230d68e05717d3d2652062f4819c6d")


def _shipped(name: str, **changes: object) -> tuple[dict, Path]:
    from gaptui.presets import read_preset_file

    path = BUNDLED / f"{name}.toml"
    raw = read_preset_file(path)[1]
    return {**raw, **changes}, path


FAMILY_PRESETS = ("smoke", "gape-smoke", "properties-smoke")


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_every_family_reads_the_run_policy_from_one_schema(name: str) -> None:
    from gaptui.presets import parse_preset

    raw, path = _shipped(name)
    run = {**raw.get("run", {}), "timeout": 600, "retries": 2, "pack_seeds": 3}
    preset = parse_preset({**raw, "run": run}, path)
    assert (preset.timeout, preset.retries, preset.pack_seeds) == (600.0, 2, 3)
    plain = parse_preset(raw, path)
    ids = {s.hash() for s in grid(plain, Workspace(Path("/tmp/unused")))}
    assert {s.hash() for s in grid(preset, Workspace(Path("/tmp/unused")))} == ids  # policy never changes a run id


@pytest.mark.parametrize("name", FAMILY_PRESETS)
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"run": {"timeout": -5}}, "[run]: timeout = -5: expected seconds > 0"),
        ({"run": {"retries": -1}}, "[run]: retries = -1: expected a count >= 0"),
        ({"run": {"pack_seeds": 0}}, "[run]: pack_seeds = 0: expected a count >= 1"),
        ({"run": {"timeout": "soon"}}, "[run]: key 'timeout' = 'soon': expected a number"),
        ({"run": {"pack_seed": 2}}, "[run]: unknown key 'pack_seed' (did you mean 'pack_seeds'?)"),
        ({"run": 3}, "[run] = 3: expected a table of run options"),
        ({"seeds": [0, -1]}, "key 'seeds' holds -1: expected seeds >= 0"),
        ({"seeds": []}, "key 'seeds' is empty"),
        ({"name": 7}, "key 'name' = 7: expected a string"),
        ({"description": ["a"]}, "key 'description' = ['a']: expected a string"),
        ({"descripton": "x"}, "unknown key 'descripton' (did you mean 'description'?)"),
    ],
)
def test_common_keys_fail_alike_in_every_family(name: str, change: dict, message: str) -> None:
    from engine.errors import GaptuiError
    from gaptui.presets import parse_preset

    raw, path = _shipped(name)
    if isinstance(change.get("run"), dict):
        change = {"run": {**raw.get("run", {}), **change["run"]}}
    with pytest.raises(GaptuiError) as error:
        parse_preset({**raw, **change}, path)
    text = str(error.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


def test_slurm_table_is_refused_by_families_that_do_not_run_on_slurm() -> None:
    from engine.errors import GaptuiError
    from gaptui.presets import parse_preset

    raw, path = _shipped("gape-smoke", slurm={"partition": "gpu"})
    with pytest.raises(GaptuiError, match="key 'slurm': the gape family does not run on Slurm"):
        parse_preset(raw, path)
    raw, path = _shipped("smoke", slurm={"time": 0})
    with pytest.raises(GaptuiError, match=r"\[slurm\]: time = 0: expected an integer >= 1"):
        parse_preset(raw, path)


def test_gape_reads_its_older_top_level_timeout_and_retries() -> None:
    from engine.errors import GaptuiError
    from gaptui.presets import parse_preset

    raw, path = _shipped("gape-smoke", timeout=120, retries=1)
    preset = parse_preset(raw, path)
    assert (preset.timeout, preset.retries) == (120.0, 1)
    with pytest.raises(GaptuiError, match="key 'timeout' is set twice"):
        parse_preset({**raw, "run": {"timeout": 60}}, path)


def test_alignment_run_options_are_the_run_spec_fields() -> None:
    import dataclasses

    from engine.alignment.preset import RunOptions
    from engine.alignment.spec import RunSpec
    from engine.tasks.presets import POLICY_KEYS

    spec = {f.name: f for f in dataclasses.fields(RunSpec)}
    options = RunOptions()
    for key, value in options.spec_fields().items():
        default = spec[key].default_factory() if callable(spec[key].default_factory) else spec[key].default
        assert value == default, key
    assert set(dataclasses.asdict(options)) - set(options.spec_fields()) == set(POLICY_KEYS)
    assert set(spec) - set(options.spec_fields()) == {
        "dataset",
        "model",
        "task",
        "model_kwargs",
        "seed",
        *RunSpec.PLACEMENT,
    }


def test_a_plug_in_family_gets_the_common_part_parsed() -> None:
    """What a family's parse_preset starts from: the shared keys parsed, its own keys handed over untouched."""
    from engine.errors import GaptuiError
    from engine.tasks.presets import RunPolicy, parse_head

    raw = {"task": "toy", "sizes": [2, 3], "seeds": [1, 1, 0], "run": {"timeout": 5, "steps": 4}}
    head = parse_head(raw, Path("toy.toml"), "toy", ("sizes",), run_keys=("steps",), required=("sizes",))
    assert (head.name, head.description, head.seeds) == ("toy", "", (1, 0))
    assert head.policy == RunPolicy(timeout=5.0)
    assert (head.own, head.run, head.slurm) == ({"sizes": [2, 3]}, {"steps": 4}, None)
    assert head.notes == ("key 'seeds' repeats 1: merged (a grid is a set of runs)",)
    with pytest.raises(GaptuiError, match=r"^toy.toml: missing key 'sizes'$"):
        parse_head({"seeds": [0]}, Path("toy.toml"), "toy", ("sizes",), required=("sizes",))


@pytest.mark.parametrize("name", sorted(p.stem for p in BUNDLED.glob("*.toml")))
def test_a_specs_dict_form_is_what_dataclasses_asdict_writes(name: str) -> None:
    """``to_dict`` builds its JSON form field by field (asdict's deep copies cost planning seconds at 20,000
    runs); it must stay what asdict writes, value for value, for every spec a shipped preset expands to."""
    import dataclasses
    import json

    for spec in grid(load_preset(name), Workspace(Path("/tmp/unused")))[:40]:
        assert spec.to_dict() == json.loads(json.dumps(dataclasses.asdict(spec))), spec.hash()


@pytest.mark.parametrize("task", ["alignment", "gape", "properties", "brec"])
def test_each_family_names_the_place_its_caller_gives(task: str) -> None:
    """A form's document is no file: its errors name the form, as the seam's ``where`` says."""
    fam = FAMILIES.get(task)
    with pytest.raises(GaptuiError, match="^the form: "):
        fam.parse_preset({"task": task, "seeds": [0], "bogus": 1}, "the form", None)
    with pytest.raises(GaptuiError, match="^x/p.toml: "):
        fam.parse_preset({"task": task, "seeds": [0], "bogus": 1}, "x/p.toml", Path("x/p.toml"))
