"""The precision run option (auto, fp32, bf16) where a user sets it: presets' [run] of every family, gaptui train
--precision, the New-experiment form; the choice ``auto`` makes from the hardware facts; the precision in a run's
history record and in gaptui show. (Training in bf16 and resuming in the checkpoint's precision:
tests/engine/test_loop.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomllib

from engine.errors import GaptuiError
from engine.hardware import (
    PRECISIONS,
    Hardware,
    RunOptions,
    choose_precision,
    cpu_has_bf16,
    resolve_precision,
)
from engine.tasks import Placement, family, load_spec
from gaptui.presets import BUNDLED
from tests.support.cli import run_cli
from tests.support.engine import Events, Line, Stopper

SMOKE = {"alignment": "smoke", "gape": "gape-smoke", "properties": "properties-smoke", "brec": "brec-smoke"}


def _with_run(name: str, **run: Any) -> dict[str, Any]:
    raw = tomllib.loads((BUNDLED / f"{name}.toml").read_text())
    raw["run"] = {**raw.get("run", {}), **run}
    return raw


# ------------------------------------------------------------------------------------------ presets


@pytest.mark.parametrize("task", list(SMOKE))
def test_a_presets_run_table_sets_the_precision_of_every_run(task: str) -> None:
    fam = family(task)
    path = Path(f"{SMOKE[task]}.toml")
    preset = fam.parse_preset(_with_run(SMOKE[task], precision="bf16"), str(path), path)
    specs = fam.grid(preset, Placement(".", "."))
    assert specs and {s.precision for s in specs} == {"bf16"}  # gape: its pretraining runs too
    plain = fam.grid(fam.parse_preset(_with_run(SMOKE[task]), str(path), path), Placement(".", "."))
    assert {s.precision for s in plain} == {"auto"}
    # set explicitly: other runs (but a training-free baseline's, such as brec's exact WL rows, which have no forward)
    trained = [s for s in specs if not fam.is_baseline(s)]
    assert {s.hash() for s in trained}.isdisjoint(s.hash() for s in plain)


@pytest.mark.parametrize("task", list(SMOKE))
def test_a_bad_precision_in_a_preset_is_one_line_naming_file_key_value_and_choices(task: str) -> None:
    path = Path(f"/p/{SMOKE[task]}.toml")
    with pytest.raises(GaptuiError) as err:
        family(task).parse_preset(_with_run(SMOKE[task], precision="fp16"), str(path), path)
    message = str(err.value)
    assert "\n" not in message
    assert message == f"{path}: [run]: precision 'fp16' is not one of auto, fp32, bf16 (did you mean 'bf16'?)"


def test_a_gape_datasets_run_precision_sets_its_downstream_runs_only() -> None:
    raw = _with_run("gape-smoke", precision="fp32")
    raw["datasets"][0]["run"]["precision"] = "bf16"
    fam = family("gape")
    specs = fam.grid(fam.parse_preset(raw, "p.toml", None), Placement(".", "."))
    assert {s.task: s.precision for s in specs} == {"alignment": "fp32", "gape": "bf16"}


# ------------------------------------------------------------------------------------------ the form


@pytest.mark.parametrize("task", list(SMOKE))
def test_the_form_has_a_precision_choice_written_into_run_and_read_back(task: str) -> None:
    fam = family(task)
    field = next(f for f in fam.form.fields() if f.key == "precision")
    assert field.kind == "choice" and tuple(field.choices) == PRECISIONS
    raw = _with_run(SMOKE[task], precision="bf16")
    body = {k: v for k, v in raw.items() if k not in ("task", "name", "description")}
    values = fam.form.form_values(body)
    assert values["precision"] == "bf16"
    doc = fam.form.preset_from_form(values)
    assert doc["run"]["precision"] == "bf16"
    specs = fam.grid(fam.parse_preset({**doc, "task": task}, "form", None), Placement(".", "."))
    assert {s.precision for s in specs} == {"bf16"}
    blank = fam.form.preset_from_form({**values, "precision": None})
    assert "precision" not in blank.get("run", {})  # left blank: the family's default (auto)


# ------------------------------------------------------------------------------------------ gaptui train


def test_train_precision_maps_onto_the_spec_of_any_family(toy: None) -> None:
    from gaptui.cli.train import with_precision

    props = {"task": "properties", "property": "irreflexive", "pooling": "mean", "dimension": "generalisation"}
    spec = load_spec(props)
    assert with_precision(spec, None) is spec
    assert with_precision(spec, "bf16").precision == "bf16"
    assert with_precision(spec, "bf16").hash() != spec.hash()
    with pytest.raises(GaptuiError, match=r"^--precision: precision 'bf61' is not one of auto, fp32, bf16 \(did"):
        with_precision(spec, "bf61")
    toy_spec = load_spec({"task": "toy", "size": 3, "steps": 2})
    with pytest.raises(GaptuiError, match="^--precision bf16: a toy run has no precision option$"):
        with_precision(toy_spec, "bf16")


@pytest.mark.e2e
def test_train_precision_is_recorded_in_the_history_and_shown(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    args = ["train", "--base", "er", "--noise", "0.1", "--model", "gcn", "--train", "10", "--val", "4", "-p", "n=12"]
    args += ["--epochs", "1", "--batch-size", "5", "--compile", "off", "--device", "cpu", "-w", str(ws)]
    bad = run_cli(*args, "--precision", "fp16")
    assert bad.returncode != 0
    assert "--precision: precision 'fp16' is not one of auto, fp32, bf16" in bad.stderr
    assert len([line for line in bad.stderr.splitlines() if line.strip()]) == 1, bad.stderr
    done = run_cli(*args, "--precision", "bf16", "--json")
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)["run"]
    from gaptui.history.store import History
    from gaptui.workspace import Workspace

    with History(Workspace.resolve(str(ws))) as history:
        record = history.get(run)
    assert record["spec"]["precision"] == "bf16" and record["repro"]["precision"] == "bf16"
    shown = run_cli("show", run, "-w", str(ws))
    assert shown.returncode == 0, shown.stderr
    assert any("repro.precision" in line and "bf16" in line for line in shown.stdout.splitlines()), shown.stdout


# ------------------------------------------------------------------------------------------ what auto chooses


CPUINFO = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f {extra}\nmodel name\t: x\n"


def test_native_bf16_on_a_cpu_is_read_from_its_flags() -> None:
    assert cpu_has_bf16(CPUINFO.format(extra="avx512_bf16"))
    assert cpu_has_bf16(CPUINFO.format(extra="amx_tile amx_bf16"))
    assert not cpu_has_bf16(CPUINFO.format(extra="avx512_vnni"))
    assert not cpu_has_bf16("")


def test_auto_picks_bf16_only_with_native_bf16_and_measurements_that_say_so() -> None:
    measured = {"cpu": True, "cuda": True}
    for kind in ("cpu", "cuda"):
        assert choose_precision("auto", Hardware(kind, bf16=True), measured) == ("bf16", False)
        assert choose_precision("auto", Hardware(kind, bf16=False), measured) == ("fp32", False)
        assert choose_precision("auto", Hardware(kind, bf16=True), {**measured, kind: False})[0] == "fp32"
        assert choose_precision("auto", Hardware(kind, bf16=True), {})[0] == "fp32"  # a kind never measured
    # An older GPU (compute capability < 8.0): neither bf16 nor TF32 whatever was measured elsewhere.
    assert choose_precision("auto", Hardware("cuda", bf16=False, tf32=False), measured, True) == ("fp32", False)
    # TF32 under auto where the device has it and it was measured; never when fp32 is asked for.
    assert choose_precision("auto", Hardware("cuda", True, True), {"cuda": False}, True) == ("fp32", True)
    assert choose_precision("auto", Hardware("cuda", True, True), {"cuda": False}, False) == ("fp32", False)
    assert choose_precision("fp32", Hardware("cuda", True, True), measured, True) == ("fp32", False)
    # Asked explicitly: as asked, whatever the hardware.
    assert choose_precision("bf16", Hardware("cpu", bf16=False), {}) == ("bf16", False)
    with pytest.raises(GaptuiError, match="^precision 'half' is not one of auto, fp32, bf16$"):
        choose_precision("half", Hardware("cpu", bf16=True), measured)


def test_resolving_on_a_device_uses_its_hardware_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import engine.hardware as hardware

    monkeypatch.setattr(hardware, "AUTO_BF16", {"cpu": True, "cuda": False})
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda cpuinfo=None: True)
    assert resolve_precision("auto", "cpu") == "bf16" and resolve_precision("fp32", "cpu") == "fp32"
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda cpuinfo=None: False)
    assert resolve_precision("auto", "cpu") == "fp32"
    # A CUDA device (its facts given): the TF32 switch follows the choice, set explicitly either way.
    monkeypatch.setattr(hardware, "hardware_of", lambda device: Hardware("cuda", bf16=True, tf32=True))
    monkeypatch.setattr(hardware, "AUTO_TF32", True)
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        assert resolve_precision("auto", "cuda") == "fp32" and torch.backends.cuda.matmul.allow_tf32 is True
        assert resolve_precision("fp32", "cuda") == "fp32" and torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_the_run_options_check_names_where_and_suggests() -> None:
    options = RunOptions("bf16", "cuda:1", "on")
    assert options.check("x") is options
    with pytest.raises(GaptuiError, match=r"^spec\.json: precision 'BF16' is not one of auto, fp32, bf16"):
        RunOptions(precision="BF16").check("spec.json")
    with pytest.raises(GaptuiError, match="^w: precision 16 is not one of auto, fp32, bf16$"):
        RunOptions(precision=16).check("w")  # type: ignore[arg-type]
    with pytest.raises(GaptuiError, match=r"^w: compile 'of' is not one of auto, on, off \(did you mean 'off'\?\)$"):
        RunOptions(compile="of").check("w")
    with pytest.raises(GaptuiError, match="^--device: device 'gpu': expected auto, cpu, cuda or cuda:N$"):
        RunOptions(device="gpu").check("--device")


def test_every_spec_hands_its_own_run_options_to_the_loop() -> None:
    raw = {"dataset": {"base": "er", "noise": 0.1, "params": {"n": 20, "degree": 5}}, "model": "gcn"}
    spec = load_spec({**raw, "precision": "bf16", "device": "cpu", "compile": "off"})
    assert spec.run_options() == RunOptions("bf16", "cpu", "off")
    props = {"task": "properties", "property": "irreflexive", "pooling": "mean", "dimension": "generalisation"}
    assert load_spec({**props, "precision": "fp32"}).run_options() == RunOptions(precision="fp32")  # no compile
    with pytest.raises(GaptuiError, match="^run spec: compile 'yes' is not one of auto, on, off$"):
        load_spec({**raw, "compile": "yes"})


def test_a_run_started_under_auto_resumes_in_its_checkpoints_precision_when_autos_choice_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.hardware as hardware
    from engine.loop import epoch_steps
    from engine.tasks import Cancelled, RunContext, run_steps

    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda cpuinfo=None: True)
    monkeypatch.setattr(hardware, "AUTO_BF16", {"cpu": True})  # auto picks bf16 here...
    with pytest.raises(Cancelled):
        run_steps(
            epoch_steps(
                Line(), RunContext(tmp_path, Events(), print, Stopper(6)), "run-hash", RunOptions("auto", "cpu")
            )
        )
    monkeypatch.setattr(hardware, "AUTO_BF16", {"cpu": False})  # ... and fp32 once the run is resumed
    lines: list[str] = []
    events = Events()
    result = run_steps(epoch_steps(Line(), RunContext(tmp_path, events, lines.append, lambda: False), "run-hash"))
    assert result.precision == "bf16" and events[0][1]["precision"] == "bf16"
    assert "resuming in bf16 precision, the checkpoint's" in lines
    assert resolve_precision("auto", "cpu") == "fp32"  # a new run takes the new choice
