"""gaptui: benchmark graph neural networks by graph alignment — the experiment manager (CLI and TUI)."""

__version__ = "0.1.0"
