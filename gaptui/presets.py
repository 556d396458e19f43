"""Presets: TOML files describing a grid of runs of one task family, expanded into that family's specs.

A preset names its family with ``task = "..."`` (a preset written before families names none and is read as
alignment's, :data:`engine.tasks.LEGACY_TASK`); everything else
in the file is the family's own grid description, validated by the family
(:meth:`engine.tasks.TaskFamily.parse_preset`).
The keys every family shares (``name``, ``description``, ``seeds``, the ``[run]`` policy and the ``[slurm]`` table
used with ``--backend slurm``) are one schema, :mod:`engine.presets`.

``--preset NAME`` looks for ``NAME`` as a path, then ``<workspace>/presets/NAME.toml``, then the presets shipped
with gaptui (``gaptui/presets/``, package data: present in a wheel install too).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError, did_you_mean
from engine.tasks import Placement, PresetBase, family, task_of
from engine.tasks.presets import SlurmOptions, toml_value
from engine.user_files import decode_user_text, read_user_bytes
from gaptui.workspace import Workspace

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

BUNDLED = Path(__file__).resolve().parent / "presets"

__all__ = [
    "BUNDLED",
    "dump_document",
    "find_preset",
    "grid",
    "load_preset",
    "parse_preset",
    "placement",
    "preset_entries",
    "preset_names",
    "preset_task",
    "read_preset_file",
    "slurm_options",
]


def preset_names(ws: Workspace | None = None) -> list[str]:
    folders = [BUNDLED] + ([ws.presets] if ws else [])
    return sorted({p.stem for folder in folders if folder.is_dir() for p in folder.glob("*.toml")})


@dataclass(frozen=True)
class PresetEntry:
    """A preset file as a picker lists it: name, family, description (``error``: why it cannot be read)."""

    name: str
    path: Path
    task: str = ""
    description: str = ""
    error: str = ""
    #: True for a file of the workspace's ``presets/`` folder (which hides a shipped preset of the same name).
    own: bool = False


def preset_entries(ws: Workspace | None = None) -> list[PresetEntry]:
    """Every preset ``--preset NAME`` finds (the workspace's, then the shipped ones), with its task and
    description, sorted by name; a file that does not read is listed with its error."""
    entries = []
    for name in preset_names(ws):
        path = find_preset(name, ws)
        own = ws is not None and path.parent == ws.presets
        try:
            raw = _read(path)
            entries.append(PresetEntry(name, path, task_of(raw), str(raw.get("description", "")), own=own))
        except GaptuiError as exc:
            entries.append(PresetEntry(name, path, error=str(exc), own=own))
    return entries


def find_preset(name: str, ws: Workspace | None = None) -> Path:
    path = Path(name).expanduser()
    if path.is_dir():
        raise GaptuiError(f"--preset {name}: is a directory; expected a preset name or a .toml file")
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            shipped = path.stem in preset_names(ws) and path.parent == Path(".")
            hint = f" (to use the shipped preset, write --preset {path.stem})" if shipped else ""
            raise GaptuiError(f"--preset {name}: file not found{hint}")
        return path
    for folder in ([ws.presets] if ws else []) + [BUNDLED]:
        candidate = folder / f"{name}.toml"
        if candidate.is_file():
            return candidate
    known = preset_names(ws)
    raise GaptuiError(f"unknown preset '{name}'{did_you_mean(name, known)}; known: {', '.join(known) or 'none'}")


def _read(path: Path) -> dict[str, Any]:
    return read_preset_file(path)[1]


def read_preset_file(path: Path) -> tuple[bytes, dict[str, Any]]:
    """A preset file's bytes and its TOML document, read once (so a hash of the bytes is of what was parsed)."""
    expected = "a preset is a TOML text file"
    content = read_user_bytes(path, expected)
    try:
        return content, tomllib.loads(decode_user_text(content, path, expected))
    except tomllib.TOMLDecodeError as exc:
        raise GaptuiError(f"{path}: not valid TOML ({exc})") from None


def preset_task(name: str, ws: Workspace | None = None) -> str:
    """The task family a preset file names (without validating the rest of it)."""
    path = find_preset(name, ws)
    return task_of(_read(path))


def load_preset(name: str, ws: Workspace | None = None) -> Any:
    """The validated preset ``name`` (a path or a preset name), of whatever family it names."""
    path = find_preset(name, ws)
    return parse_preset(_read(path), path)


def parse_preset(raw: dict[str, Any], path: Path | None = None, where: str | None = None) -> Any:
    """Validate a preset document with its family's rules; errors name ``where`` (default: the file, else
    ``preset``), the key and the value.

    The keys every family shares (``task``, ``name``, ``description``, ``seeds``, the ``[run]`` policy, ``[slurm]``)
    are read by the schema in :mod:`engine.presets`, which the family's parser starts from."""
    where = where or (str(path) if path else "preset")
    try:
        fam = family(task_of(raw))
    except GaptuiError as exc:
        raise GaptuiError(f"{where}: key 'task': {exc}") from None
    return fam.parse_preset(raw, where, path)


def slurm_options(preset: Any) -> SlurmOptions:
    """A preset's ``[slurm]`` settings (the defaults when it has none)."""
    return getattr(preset, "slurm", None) or SlurmOptions()


BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dump_document(raw: dict[str, Any]) -> str:
    """TOML text of a preset document (any family): keys with a value first, then ``[tables]`` and
    ``[[arrays of tables]]``; ``None`` values are left out. ``tomllib.loads`` reads it back equal."""
    return "\n".join(_table_lines(raw, "")).strip() + "\n"


def _table_lines(table: dict[str, Any], prefix: str) -> list[str]:
    lines = [f"{_key(k)} = {_toml(v)}" for k, v in table.items() if v is not None and not _is_table(v)]
    for key, value in table.items():
        name = f"{prefix}{_key(key)}"
        if isinstance(value, dict):
            lines += ["", f"[{name}]", *_table_lines(value, f"{name}.")]
        elif _is_table(value):
            for item in value:
                lines += ["", f"[[{name}]]", *_table_lines(item, f"{name}.")]
    return lines


def _is_table(value: Any) -> bool:
    """A TOML table or a non-empty array of tables."""
    return isinstance(value, dict) or (
        isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)
    )


def _key(key: str) -> str:
    return key if BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def toml_literal(value: Any) -> str:
    """A TOML literal of any value a preset holds: a scalar, a list, or an inline table ``{ key = value }``."""
    return _toml(value)


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        inner = ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items() if v is not None)
        return f"{{ {inner} }}" if inner else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return toml_value(value)


def placement(ws: Workspace) -> Placement:
    """Where the runs of a workspace find their data (dataset cache, raw files)."""
    return Placement(datasets_dir=str(ws.datasets), data_root=str(ws.raw_data))


def grid(preset: PresetBase, ws: Workspace, limit: int | None = None) -> list[Any]:
    """The run specs of a preset, as its family expands them (dependencies before their dependants)."""
    return family(preset.task).grid(preset, placement(ws), limit)
