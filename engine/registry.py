"""Name -> factory registries, plus ``module.path:attr`` import paths for user code, and where such code lives."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from engine.errors import GaptuiError, unknown

T = TypeVar("T")

#: ``module.path:Name`` (the name may be dotted): what :func:`import_object` imports.
IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
#: Top-level packages that are gaptui itself: their code runs whatever a preset says.
OWN_PACKAGES = ("engine", "gaptui")


def find_in_working_folder() -> None:
    """Let user code in the folder a command runs from be found, as ``python -m`` (the worker) finds it: the
    current folder is appended to ``sys.path``, after every installed package, so it never shadows one."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def import_object(path: str) -> object:
    """Import ``module.path:attr`` (``attr`` may be dotted). Raises GaptuiError with the failing part."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise GaptuiError(f"'{path}' is not an import path: expected 'module.path:ClassOrFactory'")
    find_in_working_folder()
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise GaptuiError(f"cannot import module '{module_name}' of '{path}': {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise GaptuiError(f"module '{module_name}' has no attribute '{attr}' (from '{path}')")
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """A small name registry: ``@registry.register("name")`` on a factory, ``registry.get("name")``.

    Names containing ``:`` are resolved as import paths, so a user's own object plugs in without registering.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' registered twice")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        if ":" in name:
            return import_object(name)  # type: ignore[return-value]
        key = name.lower()
        if key not in self._items:
            raise unknown(self.kind, name, self._items)
        return self._items[key]

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name.lower() in self._items or ":" in name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)


def is_import_path(value: object) -> bool:
    return isinstance(value, str) and IMPORT_PATH.fullmatch(value) is not None


def find_import_paths(doc: Any, roles: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every ``module.path:Name`` string of a parsed TOML/JSON document, values and table keys alike, in document
    order: ``{import path: role}``, the role being ``roles[key]`` for the key that holds it, else the key itself.
    Imports nothing."""
    found: dict[str, str] = {}
    roles = roles or {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, Mapping):
            for name, value in node.items():
                if is_import_path(name):
                    found.setdefault(str(name), roles.get(key, key))
                walk(value, str(name))
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item, key)
        elif is_import_path(node):
            found.setdefault(node, roles.get(key, key))

    walk(doc, "")
    return found


@dataclass(frozen=True)
class CodeOrigin:
    """Where the top-level package of an import path would be loaded from, found without importing it.

    ``location`` is the package's folder or the module's file (None when Python cannot find it); ``installed``
    says whether that is an installed package (site-packages, dist-packages, the standard library, gaptui itself)
    rather than a local file reached through the current folder or ``PYTHONPATH``.
    """

    module: str
    location: str | None
    installed: bool

    def describe(self) -> str:
        if self.location is None:
            return f"module {self.module} not found"
        if self.module in OWN_PACKAGES:
            return f"part of gaptui ({self.module})"
        if self.installed:
            return f"installed package {self.module}"
        return f"{self.module} from {self.location}, not an installed package"


def code_origin(path: str) -> CodeOrigin:
    """:class:`CodeOrigin` of ``module.path:Name``: only the top-level name is looked up, since finding a dotted
    name imports (runs) its parent packages."""
    top = path.partition(":")[0].partition(".")[0]
    find_in_working_folder()
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec
        spec = None
    if spec is None:
        return CodeOrigin(top, None, False)
    if spec.origin in ("built-in", "frozen"):
        return CodeOrigin(top, spec.origin, True)
    if spec.origin and spec.origin != "namespace":
        where = Path(spec.origin)
        location = where.parent if where.name.startswith("__init__.") else where
    else:  # a namespace package: its first folder
        location = Path(next(iter(spec.submodule_search_locations or []), "."))
    location = location.resolve()
    return CodeOrigin(top, str(location), top in OWN_PACKAGES or _installed_location(location))


def _installed_location(path: Path) -> bool:
    if {"site-packages", "dist-packages"} & set(path.parts):
        return True
    paths = sysconfig.get_paths()
    return any(path.is_relative_to(Path(paths[k]).resolve()) for k in ("stdlib", "platstdlib") if k in paths)
