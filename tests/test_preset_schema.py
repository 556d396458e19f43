"""The preset schema shared by every family: shipped presets expand to the run ids they always did."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gaptui.presets import BUNDLED, grid, load_preset
from gaptui.workspace import Workspace

#: Per shipped preset: (runs, SHA-256 of its sorted run ids). A change here changes the identity of published runs.
SHIPPED_RUN_IDS = {
    "gape-smoke": (8, "b8993daac0782aaa1e755244162c659eb55b9a03401e88d5a363e0603e29ca73"),
    "gape": (87, "4161b4c0dab4f006a7afbcea0a8292ae82df17b26b5a18920dc94e3597cfa725"),
    "paper": (2040, "230126afc6462565532a52ccd27c4eaffded1484cdec12454b25c9aa35975502"),
    "properties-smoke": (18, "71c2fe4afe495edac32532f09c6bce21beaacbddc9d3802a57e6ca77edc83fe7"),
    "properties": (2160, "f3954770e406a89382e3bb88409fb1c715230d68e05717d3d2652062f4819c6d"),
    "quick": (33, "2bce560d6418de51a39f1a9663aa66493affdedc8ec9c0063175590b3d06f268"),
    "smoke": (4, "464867a150893ac1a407359c593bd8df772322355645ae18030710fbde7f05b9"),
}
REPO_PRESETS = Path(__file__).resolve().parent.parent / "presets"


def test_every_shipped_preset_is_pinned() -> None:
    assert sorted(p.stem for p in BUNDLED.glob("*.toml")) == sorted(SHIPPED_RUN_IDS)
    for path in REPO_PRESETS.glob("*.toml"):
        assert path.read_bytes() == (BUNDLED / path.name).read_bytes(), f"{path} differs from the shipped copy"


@pytest.mark.parametrize("name", sorted(SHIPPED_RUN_IDS))
def test_shipped_preset_expands_to_the_same_run_ids(name: str) -> None:
    preset = load_preset(name)
    ids = sorted(spec.hash() for spec in grid(preset, Workspace(Path("/tmp/unused"))))
    assert (len(ids), hashlib.sha256("\n".join(ids).encode()).hexdigest()) == SHIPPED_RUN_IDS[name]
    assert (preset.timeout, preset.retries, preset.pack_seeds) == (None, 0, 1)
