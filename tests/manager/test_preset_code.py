"""Code named by a preset: listed without importing it, placed (installed package or local file), trusted per
file content, and announced by ``gaptui run`` before planning imports it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from engine.registry import code_origin, find_import_paths
from gaptui.preset_code import TRUST_FILE, config_dir, is_trusted, review_preset, trust, trust_path
from tests.support.cli import run_cli
from tests.support.presets import PROBE


def alignment_preset(module: str) -> str:
    return (
        f'noise = [0.1]\nmodels = ["gcn", "{module}:Model"]\nseeds = [0]\n'
        f'[model_options]\n"{module}:Model" = {{}}\n'
        "[run]\nepochs = 1\nout_dim = 8\nbudget = 5000\n"
        '[[datasets]]\nbase = "er"\nparams = { n = 16, degree = 4 }\ntrain = 10\nval = 4\n'
        '[[datasets]]\nbase = "pyg"\nparams = { dataset = "torch_geometric.datasets:TUDataset", name = "MUTAG" }\n'
        '[slurm]\ntime = "01:00:00"\n'
    )


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A local module ``gaptui_probe_code`` on sys.path (its folder returned); never left imported."""
    module = "gaptui_probe_code"
    code = tmp_path / "code"
    code.mkdir()
    (code / f"{module}.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(code))
    yield code
    sys.modules.pop(module, None)


def test_a_presets_import_paths_are_listed_and_placed_without_importing_them(tmp_path: Path, probe: Path) -> None:
    preset = tmp_path / "shared.toml"
    preset.write_text(alignment_preset("gaptui_probe_code"))
    review = review_preset(str(preset))
    assert [(c.path, c.role) for c in review.code] == [
        ("gaptui_probe_code:Model", "model"),
        ("torch_geometric.datasets:TUDataset", "dataset class"),
    ]  # the [model_options] key is the same model; the [slurm] time is no import path
    local, installed = review.code
    assert local.origin.location == str(probe / "gaptui_probe_code.py") and not local.origin.installed
    assert installed.origin.installed and installed.origin.module == "torch_geometric"
    assert review.local_code == (local,)
    assert not (probe / "imported").exists() and "gaptui_probe_code" not in sys.modules
    assert review.notes()[0] == (
        f"{preset}: this preset runs code from gaptui_probe_code:Model "
        f"(model; gaptui_probe_code from {probe / 'gaptui_probe_code.py'}, not an installed package)"
    )
    # the other families say what their import paths are used as
    (tmp_path / "p.toml").write_text('task = "properties"\nproperties = ["symmetric"]\npoolings = ["a.b:pool"]\n')
    pooled = review_preset(str(tmp_path / "p.toml"))
    assert [(c.path, c.role) for c in pooled.code] == [("a.b:pool", "pooling")]
    assert pooled.runnable == () and pooled.notes() == []  # not found: validation names it, nothing runs
    (tmp_path / "g.toml").write_text('task = "gape"\n[[datasets]]\nbase = "zinc"\npretrain = { model = "m:G" }\n')
    assert [(c.path, c.role) for c in review_preset(str(tmp_path / "g.toml")).code] == [("m:G", "pretraining model")]
    assert review_preset("smoke").code == ()


def test_only_the_top_level_package_is_looked_up_so_nothing_runs(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "gaptui_probe_pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('the package ran')\n")
    (package / "sub" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    origin = code_origin("gaptui_probe_pkg.sub.models:Model")
    assert origin.location == str(package) and not origin.installed
    assert "gaptui_probe_pkg" not in sys.modules
    assert code_origin("engine.models:build").describe() == "part of gaptui (engine)"
    assert code_origin("json:loads").installed and code_origin("torch.nn:Linear").installed
    assert code_origin("gaptui_no_such_package.x:Y").describe() == "module gaptui_no_such_package not found"
    assert find_import_paths({"a": ["x:y", "no colon", "01:00:00", "gpu:a100:2", "two words:x"]}) == {"x:y": "a"}


def test_allowed_preset_files_are_remembered_by_path_and_content_outside_the_workspace(
    tmp_path: Path, probe: Path
) -> None:
    preset = tmp_path / "shared.toml"
    preset.write_text(alignment_preset("gaptui_probe_code"))
    review = review_preset(str(preset))
    assert not is_trusted(review)
    trust(review)
    assert is_trusted(review_preset(str(preset)))
    assert trust_path().parent == config_dir() and not trust_path().is_relative_to(tmp_path)
    entry = json.loads(trust_path().read_text())[str(preset.resolve())]
    assert entry["sha256"] == review.sha256
    copy = tmp_path / "elsewhere" / "shared.toml"  # the same content at another path is asked about again
    copy.parent.mkdir()
    copy.write_bytes(preset.read_bytes())
    assert not is_trusted(review_preset(str(copy)))
    preset.write_text(preset.read_text() + "# edited\n")
    assert not is_trusted(review_preset(str(preset)))  # a changed file is asked about again
    # an unreadable trust file asks again, and is moved aside (not overwritten) when the next answer is stored
    trust_path().write_text("{not json")
    assert not is_trusted(review)
    trust(review)
    assert is_trusted(review) and len(list(config_dir().glob(f"{TRUST_FILE}.corrupt-*"))) == 1


@pytest.mark.e2e
def test_run_dry_run_names_the_code_before_importing_it(tmp_path: Path, probe: Path) -> None:
    preset = tmp_path / "shared.toml"
    preset.write_text(alignment_preset("gaptui_probe_code").split('[[datasets]]\nbase = "pyg"')[0])
    path = os.pathsep.join(filter(None, [str(probe), os.environ.get("PYTHONPATH", "")]))
    res = run_cli(
        "run", "--preset", str(preset), "--dry-run", "--list", "--no-estimate", "-w", str(tmp_path / "ws"),
        env={"PYTHONPATH": path},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    note = (
        f"note: {preset}: this preset runs code from gaptui_probe_code:Model "
        f"(model; gaptui_probe_code from {probe / 'gaptui_probe_code.py'}, not an installed package)"
    )
    assert lines[0] == note
    # the headless command imports it as before (the user typed it), after saying so
    assert "probe module imported" in lines[1:] and (probe / "imported").exists()
    assert "gaptui_probe_code:Model seed 0" in res.stdout


@pytest.mark.e2e
def test_train_names_the_code_first_and_the_console_script_finds_a_module_in_its_folder(tmp_path: Path) -> None:
    """`gaptui train --preset P` says which code it imports before importing it, as `gaptui run` does; and the
    installed `gaptui` command (not `python -m`, which puts the folder on sys.path itself) finds a module in the
    folder it runs from, as the docs say ("run from your project folder")."""
    import subprocess

    (tmp_path / "gaptui_cwd_model.py").write_text(PROBE)
    (tmp_path / "p.toml").write_text(alignment_preset("gaptui_cwd_model").split('[[datasets]]\nbase = "pyg"')[0])
    script = Path(sys.executable).with_name("gaptui")
    env = {**os.environ, "COLUMNS": "200", "GAPTUI_OFFLINE": "1", "PYTHONPATH": ""}
    note = (
        f"note: {tmp_path / 'p.toml'}: this preset runs code from gaptui_cwd_model:Model "
        f"(model; gaptui_cwd_model from {tmp_path / 'gaptui_cwd_model.py'}, not an installed package)"
    ).replace(f"{tmp_path / 'p.toml'}", "p.toml")
    dry = ["run", "--preset", "p.toml", "--dry-run", "--no-estimate", "-w", "ws"]
    res = subprocess.run([str(script), *dry], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == note and "probe module imported" in res.stderr
    (tmp_path / "imported").unlink()
    train = ["train", "--preset", "p.toml", "--where", "model=gaptui_cwd_model:Model", "--where", "seed=7", "-w", "ws"]
    res = subprocess.run([str(script), *train], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert lines[0] == note and lines[1] == "probe module imported" and lines[-1].startswith("error: --preset p.toml")
