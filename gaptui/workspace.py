"""The workspace: one folder holding the dataset cache, run folders, history and exports. This module is the one
home of its layout (every path inside it); its default name and environment variable are
:mod:`engine.placement`'s, which a spec run without a grid reads too."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from engine.placement import DEFAULT_WORKSPACE, ENV_WORKSPACE

__all__ = ["DEFAULT_WORKSPACE", "ENV_WORKSPACE", "Workspace"]


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def resolve(cls, path: str | os.PathLike[str] | None = None) -> Workspace:
        """``path``, else ``$GAPTUI_WORKSPACE``, else ``./gaptui-runs`` (:data:`DEFAULT_WORKSPACE`)."""
        chosen = path or os.environ.get(ENV_WORKSPACE) or DEFAULT_WORKSPACE
        return cls(Path(chosen).expanduser().resolve())

    @property
    def datasets(self) -> Path:
        return self.root / "datasets"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def exports(self) -> Path:
        return self.root / "exports"

    @property
    def history(self) -> Path:
        return self.root / "history.json"

    @property
    def history_lock(self) -> Path:
        """The short lock every read-modify-write of the history holds."""
        return self.root / "history.lock"

    @property
    def manager_lock(self) -> Path:
        """The lock of the one manager (``gaptui run``, the terminal app) a workspace has at a time."""
        return self.root / "manager.lock"

    @property
    def presets(self) -> Path:
        """The workspace's own presets (beside the bundled ones)."""
        return self.root / "presets"

    @property
    def references(self) -> Path:
        """The workspace's own reference files (beside the bundled ones)."""
        return self.root / "references"

    @property
    def tune(self) -> Path:
        """The tuning studies' SQLite files, one per study."""
        return self.root / "tune"

    @property
    def slurm_logs(self) -> Path:
        """Slurm's output of the workspace's jobs, one folder per job."""
        return self.root / "slurm"

    @property
    def raw_data(self) -> Path:
        """Raw files of real datasets: ``$GAPTUI_DATA`` when set, else ``<workspace>/data``."""
        env = os.environ.get("GAPTUI_DATA")
        return Path(env).expanduser().resolve() if env else self.root / "data"
