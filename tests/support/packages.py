"""Installed distributions as ``importlib.metadata`` sees them, faked and hidden: a test of a data package's
missing-extra line runs whether or not the extra is installed here."""

from __future__ import annotations

from pathlib import Path


def hidden_distributions(tmp_path: Path, *names: str) -> dict[str, str]:
    """An environment whose Python sees the distributions ``names`` as not installed (a ``sitecustomize`` that makes
    :func:`importlib.metadata.distribution` refuse them), so a test of the missing-extra line runs whether or not
    the extra is installed here."""
    folder = tmp_path / "hide-dists"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import importlib.metadata as m\n"
        f"_hidden = {set(names)!r}\n"
        "_real = m.distribution\n"
        "def _distribution(name):\n"
        "    if name in _hidden:\n"
        "        raise m.PackageNotFoundError(name)\n"
        "    return _real(name)\n"
        "m.distribution = _distribution\n"
    )
    return {"PYTHONPATH": str(folder)}


def fake_distribution(site: Path, name: str, version: str) -> None:
    """A ``*.dist-info`` folder as pip writes it, so :func:`importlib.metadata.distribution` finds ``name`` in
    ``site`` (the package's files are placed beside it by the caller)."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("")
