"""Name -> factory registries, plus ``module.path:attr`` import paths for user code."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from engine.errors import GaptuiError, unknown

T = TypeVar("T")


def import_object(path: str) -> object:
    """Import ``module.path:attr`` (``attr`` may be dotted). Raises GaptuiError with the failing part."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise GaptuiError(f"'{path}' is not an import path: expected 'module.path:ClassOrFactory'")
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
