"""The user-interface side of the task families shipped with gaptui: one package per family.

``gaptui/families/<name>/commands.py`` holds the commands that make sense for that family only (building
alignment datasets, embedding with a GAPE model, building the property suite...) and a ``register(app)`` that adds
them to the CLI. Everything else a family shows (its form fields, tables, estimates, reference) it declares through
the hooks of :class:`engine.tasks.TaskFamily`, so generic gaptui code never names a family and a plug-in family
needs no folder here.
"""

from __future__ import annotations

import importlib
import pkgutil

import typer


def register_commands(app: typer.Typer) -> None:
    """Add the commands of every family package under ``gaptui/families/`` that has a ``commands`` module."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.ispkg:
            continue
        try:
            commands = importlib.import_module(f"{__name__}.{info.name}.commands")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{info.name}.commands":
                raise
            continue
        commands.register(app)
