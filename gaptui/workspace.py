"""The workspace: one folder holding the dataset cache, run folders, history and exports."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_WORKSPACE = "gaptui-runs"
ENV_WORKSPACE = "GAPTUI_WORKSPACE"


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def resolve(cls, path: str | os.PathLike[str] | None = None) -> Workspace:
        """``path``, else ``$GAPTUI_WORKSPACE``, else ``./gaptui-runs``."""
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
    def raw_data(self) -> Path:
        """Raw files of real datasets: ``$GAPTUI_DATA`` when set, else ``<workspace>/data``."""
        env = os.environ.get("GAPTUI_DATA")
        return Path(env).expanduser().resolve() if env else self.root / "data"
