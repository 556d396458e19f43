"""The user-interface side of the task families shipped with gaptui: one package per family.

``gaptui/families/<name>/commands.py`` holds the commands that make sense for that family only (building
alignment datasets, embedding with a GAPE model, building the property suite...) and a ``register(app)`` that adds
them to the CLI. A plug-in family adds its own the same way: its ``commands`` names a module with a
``register(app)`` (:class:`engine.tasks.TaskFamily`). Everything else a family shows (its form, tables, estimates,
references) it declares on its :class:`~engine.tasks.TaskFamily`, so generic gaptui code never names a family and
a plug-in family needs no folder here.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer


def register_commands(app: typer.Typer) -> None:
    """Add the commands of every family package under ``gaptui/families/`` that has a ``commands`` module, then
    those of every registered family that names a ``commands`` module of its own (plug-ins)."""
    done: set[str] = set()
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
        done.add(commands.__name__)
    from engine.tasks import FAMILIES

    for fam in FAMILIES:
        if fam.commands and fam.commands not in done:
            try:
                importlib.import_module(fam.commands).register(app)
            except Exception as exc:  # a plug-in's bug must not take the CLI down
                print(
                    f"warning: task family '{fam.name}': its commands ({fam.commands}) were not added "
                    f"({type(exc).__name__}: {' '.join(str(exc).split())})",
                    file=sys.stderr,
                )
            done.add(fam.commands)
