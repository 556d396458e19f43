"""What the tests share: builders of presets, records, specs and raw dataset files, the CLI run in a subprocess or in
this process, waiters, and the plug-ins that tests load by import path (``tests.support.models``,
``tests.support.worker_models``, ``tests.support.toy_family``). No test module imports another: a builder two files
use lives here, once."""

from __future__ import annotations

from pathlib import Path

#: The repository's root: the working folder of every CLI subprocess a test starts.
ROOT = Path(__file__).resolve().parents[2]
#: Data files the tests read (an old history, ...).
FIXTURES = ROOT / "tests" / "fixtures"
