"""Raw files of real datasets: downloads bounded in time (or refused offline), PyG datasets opened from their
folder, with one error line naming the files to place and where when they are missing or unreadable."""

from __future__ import annotations

import http.client
import os
import pickle
import shutil
import socket
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.cache import discard
from engine.errors import GaptuiError

#: Seconds any single socket operation (connect, read) of a download may block.
DOWNLOAD_TIMEOUT_S = 20.0

#: What a failed or interrupted download raises: socket / URL errors (OSError), broken HTTP responses, and
#: truncated archives.
NETWORK_ERRORS: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException, zipfile.BadZipFile, EOFError)


def offline() -> bool:
    """Whether downloads are switched off (``GAPTUI_OFFLINE`` set to 1 / true / yes / on)."""
    return os.environ.get("GAPTUI_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


@contextmanager
def socket_timeout(seconds: float = DOWNLOAD_TIMEOUT_S) -> Iterator[None]:
    """Bound every blocking socket call made inside the block (PyG's ``urlopen`` passes no timeout itself).

    The default timeout is process-wide, so it is restored on exit.
    """
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


#: Seconds the network probe (:func:`reachable`) waits for a connection before it calls a host unreachable.
PROBE_TIMEOUT_S = 3.0

_reachable: dict[str, bool] = {}


def reachable(url: str) -> bool:
    """Whether this machine can open a connection to the host of ``url`` (asked once per host and process, within
    :data:`PROBE_TIMEOUT_S`): a machine without network is told at once, before any download is tried and retried."""
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or ""
    port = parsed.port or (80 if parsed.scheme == "http" else 443)
    key = f"{host}:{port}"
    if key not in _reachable:
        try:
            socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
            _reachable[key] = True
        except OSError:
            _reachable[key] = False
    return _reachable[key]


def download_blocked(url: str) -> str:
    """Why a download from ``url`` cannot happen now ("" when it can be tried): downloads switched off, or no
    network to reach its host."""
    if offline():
        return "downloads are off (GAPTUI_OFFLINE=1)"
    if not reachable(url):
        return f"there is no network (cannot reach {urllib.parse.urlsplit(url).hostname})"
    return ""


@dataclass(frozen=True)
class RawFiles:
    """The raw files a real dataset reads: ``files`` (names relative to ``folder``), downloaded from the address
    ``url()`` gives (asked only when a file is missing: PyG's datasets name theirs, and importing them is slow)."""

    folder: Path
    files: tuple[str, ...]
    url: Callable[[], str]

    def check(self, name: str) -> None:
        """Refuse, before anything is planned on the dataset ``name``, raw files that are missing and cannot be
        fetched (downloads off, no network, some files there already): one line naming the dataset, the folder and
        the files to place there."""
        missing = check_download_allowed(name, self.folder, self.files)
        if missing and (why := download_blocked(self.url())):
            raise missing_error(name, self.folder, missing, f"and {why}")


def pyg_url(dataset: str, *args: str) -> str:
    """Where the PyG dataset class ``dataset`` downloads its raw files from (``url.format(*args)``)."""
    import torch_geometric.datasets

    return str(getattr(torch_geometric.datasets, dataset).url.format(*args))


def missing_files(folder: Path, files: Sequence[str]) -> list[str]:
    """The names among ``files`` that do not exist in ``folder``, in the given order."""
    return [f for f in files if not (folder / f).is_file()]


def missing_error(name: str, folder: Path, missing: Sequence[str], why: str) -> GaptuiError:
    """The one-line error for raw files that are absent and could not be fetched."""
    return GaptuiError(f"{name}: raw files missing {why}: place {', '.join(missing)} in {folder}")


def check_download_allowed(name: str, folder: Path, files: Sequence[str]) -> list[str]:
    """Return the missing raw files, raising when a download must not be attempted.

    A download is refused when ``GAPTUI_OFFLINE`` is set, and when some of the files are already there: PyG's
    downloaders delete the raw folder first, which would throw away files the user placed by hand.
    """
    missing = missing_files(folder, files)
    if missing and offline():
        raise missing_error(name, folder, missing, "and downloads are off (GAPTUI_OFFLINE=1)")
    if missing and len(missing) < len(files):
        raise missing_error(name, folder, missing, "(not downloading: that would replace the files already there)")
    return missing


@contextmanager
def _cleanup_on_failure(folder: Path) -> Iterator[None]:
    """Remove files and folders created directly in ``folder`` when the block fails.

    A download interrupted half way leaves a truncated archive that PyG would otherwise reuse on the next run.
    """
    folder.mkdir(parents=True, exist_ok=True)
    before = set(os.listdir(folder))
    try:
        yield
    except BaseException:
        for entry in set(os.listdir(folder)) - before:
            path = folder / entry
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise


def download_zip(url: str, into: Path) -> None:
    """Download the zip archive at ``url`` and extract it into ``into`` (the archive itself is not kept)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / (url.rpartition("/")[2] or "download.zip")
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, open(archive, "wb") as out:
        shutil.copyfileobj(response, out, length=1 << 20)
    try:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(into)
    finally:
        archive.unlink(missing_ok=True)


def fetch_raw(name: str, folder: Path, files: Sequence[str], dataset_dir: Path, download: Callable[[], None]) -> None:
    """Make sure ``files`` exist in ``folder``, calling ``download`` (with bounded sockets) when none do."""
    missing = check_download_allowed(name, folder, files)
    if not missing:
        return
    try:
        with socket_timeout(), _cleanup_on_failure(dataset_dir):
            download()
    except NETWORK_ERRORS as exc:
        raise missing_error(name, folder, missing, f"and the download failed ({error_reason(exc)})") from exc
    still = missing_files(folder, files)
    if still:
        raise missing_error(name, folder, still, "(the download did not provide them)")


def first_items(rows: Sequence[int], count: int = 5) -> str:
    """The first ``count`` of ``rows``, comma-separated, with an ellipsis when there are more."""
    shown = ", ".join(str(r) for r in rows[:count])
    return shown + (", ..." if len(rows) > count else "")


def error_reason(exc: BaseException) -> str:
    """Why ``exc`` happened, on one line of at most 200 characters (its type when it says nothing)."""
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:200]


def open_pyg(name: str, folder: Path, files: Sequence[str], dataset_dir: Path, make: Callable[[], Any]) -> Any:
    """Construct a PyG dataset whose raw files are ``files`` in ``folder``.

    The constructor downloads missing raw files itself (only allowed when none are present and not offline)
    and processes them into ``processed/`` once; network and unreadable-file errors become one-line errors. A
    ``processed/`` folder that cannot be read (a truncated or altered file) is moved aside with one warning and
    the raw files processed again.
    """
    missing = check_download_allowed(name, folder, files)
    try:
        return _construct(name, folder, missing, dataset_dir, make)
    except UNREADABLE as exc:
        processed = dataset_dir / "processed"
        if not processed.is_dir():
            raise GaptuiError(f"{name}: cannot read the raw files in {folder}: {error_reason(exc)}") from exc
        discard(processed, f"{name}'s processed cache", error_reason(exc), then="processing the raw files again")
    try:
        return _construct(name, folder, missing, dataset_dir, make)
    except UNREADABLE as exc:
        raise GaptuiError(f"{name}: cannot read the raw files in {folder}: {error_reason(exc)}") from exc


#: What constructing a PyG dataset from damaged raw or processed files raises (``torch.load``: RuntimeError).
UNREADABLE = (*NETWORK_ERRORS, pickle.UnpicklingError, RuntimeError)


def _construct(name: str, folder: Path, missing: list[str], dataset_dir: Path, make: Callable[[], Any]) -> Any:
    try:
        with socket_timeout(), _cleanup_on_failure(dataset_dir):
            return make()
    except NETWORK_ERRORS as exc:
        if missing:
            raise missing_error(name, folder, missing, f"and the download failed ({error_reason(exc)})") from exc
        raise


def pyg_item(data: Any, label: str) -> tuple[int, np.ndarray]:
    """``(num_nodes, edge_index [2, E])`` of one PyG ``Data`` object; everything else is dropped."""
    edge_index = getattr(data, "edge_index", None)
    num_nodes = getattr(data, "num_nodes", None)
    if edge_index is None or num_nodes is None:
        raise GaptuiError(f"{label} has no edge_index or no node count: not a homogeneous PyG graph")
    return int(num_nodes), edge_index.detach().cpu().numpy()


def pick(available: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of ``count`` of ``available`` items: the same draws as :func:`engine.sources.base.subset`."""
    if count >= available:
        return np.arange(available)
    return np.sort(rng.choice(available, size=count, replace=False))
