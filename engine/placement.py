"""Where a run finds its data when no grid placed it.

A grid copies its workspace's dataset folder into every spec (:class:`engine.tasks.spec.Placement`); a spec run by
hand (``python -m engine``, a notebook) without one uses the default workspace's: ``$GAPTUI_WORKSPACE/datasets``,
else ``./gaptui-runs/datasets``. The two names are the ones :mod:`gaptui.workspace` resolves a workspace with; they
live here because the engine never imports the manager.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The workspace folder used when none is named.
DEFAULT_WORKSPACE = "gaptui-runs"
#: The environment variable that names the workspace.
ENV_WORKSPACE = "GAPTUI_WORKSPACE"


def default_datasets_dir() -> Path:
    """The default workspace's dataset folder: ``$GAPTUI_WORKSPACE/datasets``, else ``./gaptui-runs/datasets``."""
    return Path(os.environ.get(ENV_WORKSPACE) or DEFAULT_WORKSPACE) / "datasets"


def datasets_folder(datasets_dir: str | None) -> Path:
    """A spec's dataset folder: its own ``datasets_dir`` when a grid placed it, else :func:`default_datasets_dir`."""
    return Path(datasets_dir) if datasets_dir else default_datasets_dir()
