"""The workspace's default and a spec's default dataset folder are one: a run started by hand without a grid
reads the datasets of the workspace the CLI and the app would open."""

from __future__ import annotations

from engine.placement import datasets_folder
from gaptui.workspace import Workspace


def test_an_unplaced_spec_reads_the_default_workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GAPTUI_WORKSPACE", raising=False)
    assert datasets_folder(None).resolve() == Workspace.resolve().datasets == tmp_path / "gaptui-runs" / "datasets"
    monkeypatch.setenv("GAPTUI_WORKSPACE", str(tmp_path / "elsewhere"))
    assert datasets_folder(None).resolve() == Workspace.resolve().datasets == tmp_path / "elsewhere" / "datasets"


def test_a_placed_spec_reads_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("GAPTUI_WORKSPACE", str(tmp_path / "elsewhere"))
    assert datasets_folder(str(tmp_path / "placed")) == tmp_path / "placed"
