"""A non-editable install (a built wheel) carries everything the CLI needs, presets included."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import ROOT

#: Every test here starts the CLI or a worker in a subprocess.
pytestmark = pytest.mark.e2e


def test_wheel_install_finds_the_shipped_presets(tmp_path: Path) -> None:
    # Build the wheel offline with the setuptools already installed, like `pip install .` builds it, from a copy of
    # the sources (a build/ folder in the checkout could carry stale modules into the wheel).
    src = tmp_path / "src"
    junk = shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__", "gaptui-runs", "*.whl")
    shutil.copytree(ROOT, src, ignore=junk)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("gaptui-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"gaptui/presets/smoke.toml", "gaptui/presets/quick.toml", "gaptui/presets/paper.toml"} <= set(names)
    # Install it alone into a folder and run the CLI from elsewhere, so the checkout cannot be imported.
    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    env = {**os.environ, "PYTHONPATH": str(target), "GAPTUI_OFFLINE": "1", "COLUMNS": "200"}
    where = subprocess.run(
        [sys.executable, "-c", "import gaptui, engine; print(gaptui.__file__); print(engine.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert all(line.startswith(str(target)) for line in where.stdout.split()), where.stdout
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "gaptui",
            "run",
            "--preset",
            "smoke",
            "--dry-run",
            "--no-estimate",
            "--workspace",
            str(tmp_path / "ws"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "preset smoke (task alignment): 4 runs" in res.stdout
