"""Fixtures of every tier: an isolated environment (offline, no user settings), torch on one thread, the notices an
app showed, the toy plug-in family, no network, a small disk. Builders the tests share live in ``tests/support``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# One thread per torch (here and in every worker a test starts, which inherit the environment): the suite runs
# two test processes on two cores, and oversubscribed threads make it several times slower.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"


@pytest.fixture(autouse=True)
def _offline_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Never try a download in tests, and never touch the user's default workspace or settings (trusted presets).
    monkeypatch.setenv("GAPTUI_OFFLINE", "1")
    monkeypatch.setenv("GAPTUI_CONFIG", str(tmp_path_factory.mktemp("config")))
    monkeypatch.delenv("GAPTUI_WORKSPACE", raising=False)
    monkeypatch.delenv("GAPTUI_DATA", raising=False)


@pytest.fixture(autouse=True)
def _fast_tier_starts_no_python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked ``e2e`` that starts a Python process (the CLI, a worker) fails at once: the fast tier
    (``-m "not e2e and not slow"``) is the suite without them, so its time stays what it says."""
    if request.node.get_closest_marker("e2e") or request.node.get_closest_marker("slow"):
        return
    started = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen, args: object, *rest: object, **kwargs: object) -> None:
        argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
        if any(Path(a).name.startswith("python") for a in argv[:1]) or sys.executable in argv:
            raise AssertionError(f"this test starts a Python process ({' '.join(argv[:4])} ...): mark it e2e")
        started(self, args, *rest, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Torch on one thread in this process too (tiny tensors: more threads only spin, badly so on a busy machine)."""
    if "torch" not in sys.modules:  # the environment above already holds for a torch imported later
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _notice_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every notification a Textual app shows, kept in its ``notice_log`` for the test to read: the app's own list
    drops a notification once it times out (5 s), which a loaded machine reaches before the test looks."""
    if "textual.app" not in sys.modules:  # not a test of an app
        return
    from textual.app import App

    shown = App.notify

    def notify(self: App, message: str, *args: object, **kwargs: object) -> None:
        self.__dict__.setdefault("notice_log", []).append(str(message))
        shown(self, message, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(App, "notify", notify)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The toy plug-in family of ``tests/support/toy_family.py`` registered in this process for one test, after the
    built-in families (as ``GAPTUI_FAMILIES`` registers it; the variable is set for the subprocesses the test
    starts), and dropped afterwards, so no other test sees it or a registry in another order."""
    from engine.tasks import FAMILIES

    monkeypatch.setenv("GAPTUI_FAMILIES", "tests.support.toy_family")
    FAMILIES.names()  # the built-ins first
    from tests.support.toy_family import Toy

    if "toy" not in FAMILIES:
        FAMILIES.register(Toy())
    yield
    FAMILIES.unregister("toy")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Downloads through urllib fail at once; the list records the URLs that were attempted."""
    import urllib.error
    import urllib.request

    attempts: list[str] = []

    def refuse(url, *args, **kwargs):
        attempts.append(str(getattr(url, "full_url", url)))
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    return attempts


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 KiB tmpfs at ``tmp_path/disk`` (a full disk as a user meets it); ``grow(size)`` frees space, as
    ``mount -o remount,size=...`` does. Skipped where mounting needs a root this run does not have."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")

    def grow(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)

    try:
        yield disk, grow
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
