"""Screens depend on the app through :class:`gaptui.tui.context.AppContext` only."""

from __future__ import annotations

import ast
from pathlib import Path

from gaptui.tui.context import AppContext
from tests.support import ROOT

SCREENS = ROOT / "gaptui" / "tui" / "screens"


def test_the_app_provides_what_screens_use(tmp_path: Path) -> None:
    from gaptui.tui.app import GaptuiApp
    from gaptui.workspace import Workspace

    app = GaptuiApp(Workspace(tmp_path))
    assert isinstance(app, AppContext)
    members = {n for n in AppContext.__annotations__} | {n for n in vars(AppContext) if not n.startswith("_")}
    used = set()
    for path in SCREENS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "gapp":
                used.add(node.attr)
    assert used and used <= members, f"screens use app members the protocol does not declare: {used - members}"


def test_no_screen_imports_the_app_class() -> None:
    for path in SCREENS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "gaptui.tui.app", f"{path.name} imports the app module"
