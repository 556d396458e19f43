"""The Python code a preset runs: the import paths it names, where each would load from, and which preset files
a workspace trusts.

A preset may name user code as ``module.path:Name`` (a model, a pooling, a dataset class); planning imports it,
so opening a preset someone shared runs their code. :func:`review_preset` lists that code without importing any
of it (the family says where its presets hold import paths: :meth:`engine.tasks.TaskFamily.preset_import_paths`).
Every command prints the list before importing any of it; the terminal app asks once per preset file before
importing code that is not part of an installed package, remembered by the file's absolute path and SHA-256 in the
user's own settings folder (``~/.config/gaptui/trusted-presets.json``), never in a workspace: a workspace received
from someone else cannot make the app import code without asking.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.files import atomic_write_json, move_aside, read_json
from engine.registry import CodeOrigin, code_origin
from engine.tasks import family, task_of
from gaptui.presets import find_preset, parse_preset, read_preset_file
from gaptui.workspace import Workspace

#: Preset files whose code the user allowed, by absolute path: ``{path: {"sha256": hex, "allowed": UTC time}}``,
#: in the user's settings folder (:func:`config_dir`).
TRUST_FILE = "trusted-presets.json"


@dataclass(frozen=True)
class PresetCode:
    """One import path a preset names: what the preset uses it as, and where its package would load from."""

    path: str
    role: str
    origin: CodeOrigin

    def describe(self) -> str:
        return f"{self.path} ({self.role}; {self.origin.describe()})"


@dataclass(frozen=True)
class PresetReview:
    """A preset file as read once: its SHA-256, its document and the code it names (nothing imported)."""

    path: Path
    sha256: str
    raw: dict[str, Any]
    code: tuple[PresetCode, ...]

    @property
    def runnable(self) -> tuple[PresetCode, ...]:
        """The import paths whose module Python finds: the code loading the preset runs (the others make
        validation fail with one error naming them, and run nothing)."""
        return tuple(c for c in self.code if c.origin.location is not None)

    @property
    def local_code(self) -> tuple[PresetCode, ...]:
        """The runnable import paths whose code is not part of an installed package (a local file)."""
        return tuple(c for c in self.runnable if not c.origin.installed)

    def notes(self) -> list[str]:
        """One line per runnable import path, for ``gaptui run`` (empty when the preset runs no user code)."""
        return [f"{self.path}: this preset runs code from {c.describe()}" for c in self.runnable]

    @property
    def name(self) -> str:
        """The preset's name as its runs are recorded (``name``, else the file's stem), read without validating."""
        named = self.raw.get("name")
        return named if isinstance(named, str) and named else self.path.stem

    def load(self, note: Callable[[str], None]) -> Any:
        """The validated preset, parsed from the bytes that were hashed (this imports the code it names), after
        saying (``note``, one line each) which code it will import: the one way every command (``run``, ``train
        --preset``, ``tune`` with ``--dry-run`` or ``--status``) and the terminal app load a preset."""
        for line in self.notes():
            note(line)
        return parse_preset(self.raw, self.path)


def review_preset(name: str, ws: Workspace | None = None) -> PresetReview:
    """Read preset ``name`` (a path or a preset name) and list the code it names, importing none of it."""
    path = find_preset(name, ws)
    content, raw = read_preset_file(path)
    try:
        fam = family(task_of(raw))
    except GaptuiError as exc:
        raise GaptuiError(f"{path}: key 'task': {exc}") from None
    named = fam.preset_import_paths({k: v for k, v in raw.items() if k != "slurm"})
    code = tuple(PresetCode(p, role, code_origin(p)) for p, role in named.items())
    return PresetReview(path, hashlib.sha256(content).hexdigest(), raw, code)


#: ``$GAPTUI_CONFIG`` (else ``$XDG_CONFIG_HOME/gaptui``, else ``~/.config/gaptui``): the user's own settings,
#: outside every workspace, so that a workspace received from someone else can never say what the user trusts.
ENV_CONFIG = "GAPTUI_CONFIG"


def config_dir() -> Path:
    """The user's gaptui settings folder (see :data:`ENV_CONFIG`)."""
    own = os.environ.get(ENV_CONFIG, "").strip()
    if own:
        return Path(own).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".config") / "gaptui"


def trust_path() -> Path:
    return config_dir() / TRUST_FILE


def _trusted() -> dict[str, Any] | None:
    """The trust file's entries; None when it exists but is not a JSON object."""
    path = trust_path()
    if not path.exists():
        return {}
    data = read_json(path)
    return data if isinstance(data, dict) else None


def _key(review: PresetReview) -> str:
    return str(review.path.expanduser().resolve())


def is_trusted(review: PresetReview) -> bool:
    """Whether the user allowed the code of this preset file: this absolute path with this content (SHA-256), as
    recorded in the user's own trust file (never a file of a workspace)."""
    entry = (_trusted() or {}).get(_key(review))
    return isinstance(entry, dict) and entry.get("sha256") == review.sha256


def trust(review: PresetReview) -> None:
    """Remember that the user allowed the code of this preset file as it is now (an unreadable trust file is moved
    aside)."""
    entries = _trusted()
    path = trust_path()
    if entries is None:
        move_aside(path)
        entries = {}
    entries[_key(review)] = {"sha256": review.sha256, "allowed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, entries, indent=2, sort_keys=True)
