"""Fixtures of the engine's tests."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def in_process() -> Iterator[Callable[[list[tuple[dict[str, Any] | Path, Path]]], int]]:
    """``python -m engine --spec S --out O ...`` in this process (no start-up cost): each run a spec (a dict,
    written beside its output folder, or a spec file) and its output folder; signal handlers restored after."""
    import torch

    from engine import worker

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def run(runs: list[tuple[dict[str, Any] | Path, Path]]) -> int:
        args = []
        for spec, out in runs:
            if isinstance(spec, dict):
                path = out.with_suffix(".json")
                path.write_text(json.dumps(spec))
                spec = path
            args += ["--spec", str(spec), "--out", str(out)]
        return worker.main([*args, "--quiet"])

    yield run
    torch.set_num_threads(threads)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
