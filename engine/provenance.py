"""Which code a run ran: gaptui's version with what identifies its sources, recorded with every result.

A release number alone (``0.1.0``) is the same for every commit, so :func:`code_version` adds to it:

- ``0.1.0 (commit 1a2b3c4d5e6f)`` when the sources are a git checkout (an editable install), with ``-dirty`` after
  the commit when ``gaptui/``, ``engine/`` or ``pyproject.toml`` have uncommitted changes or new files;
- ``0.1.0 (sources 3f9a0c12b4d1)`` otherwise (a wheel, a copy): the first 12 hex digits of the SHA-256 of every
  ``.py`` file of the installed ``gaptui/`` and ``engine/`` packages (their paths and bytes), so two installs of
  different code never share it.

Worked out once per process (a git call or a read of a few hundred files) and cached.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

#: The packages whose sources are the code (the manager and the engine are installed side by side).
PACKAGES = ("gaptui", "engine")
#: Paths of a checkout whose changes make a commit ``-dirty``.
CODE_PATHS = (*PACKAGES, "pyproject.toml")
#: Hex digits kept of a commit or of the sources' hash.
SHORT = 12


def source_root() -> Path:
    """The folder holding the ``engine`` (and ``gaptui``) packages: a checkout's root, or ``site-packages``."""
    return Path(__file__).resolve().parent.parent


def release() -> str:
    """gaptui's release number from the installed distribution's metadata ("unknown" when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gaptui")
    except PackageNotFoundError:
        return "unknown"


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def checkout_commit(root: Path) -> str | None:
    """``<commit>`` or ``<commit>-dirty`` when ``root`` is itself the top of a git checkout; None otherwise (an
    install in a ``site-packages`` that happens to lie inside some repository is not that repository's code)."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return None
    head = _git(root, "rev-parse", "HEAD")
    if not head:
        return None
    changes = _git(root, "status", "--porcelain", "--", *CODE_PATHS)
    return head[:SHORT] + ("-dirty" if changes else "")


def sources_hash(root: Path) -> str:
    """The first :data:`SHORT` hex digits of the SHA-256 over the ``.py`` files of :data:`PACKAGES` under
    ``root``: each file's path relative to ``root`` and its bytes, in path order."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:SHORT]


@functools.cache
def code_version() -> str:
    """gaptui's release with its commit or sources hash (module docstring); the same string all process long."""
    root = source_root()
    commit = checkout_commit(root)
    if commit is not None:
        return f"{release()} (commit {commit})"
    return f"{release()} (sources {sources_hash(root)})"
