"""The Textual terminal UI of gaptui: compose grids, follow runs, browse history, rank architectures.

Entry point: :func:`gaptui.tui.app.run_app` (``gaptui`` without arguments, or ``gaptui tui``). The engine never
imports this package; the TUI drives the same scheduler, history and analysis modules as the headless CLI.
"""
