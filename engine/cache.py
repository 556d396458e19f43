"""The one store behind every cache gaptui writes: fingerprinted when written, verified when read, moved aside
(never trusted, never deleted) when anything is off.

Folder entries (alignment, property and molecule datasets, positional encodings) hold their data files and a
``meta.json`` whose ``files`` maps each data file (path relative to the entry) to its size and SHA-256. An entry
is written into a hidden temporary sibling and renamed into place, so it is never half-written. Opening one
checks ``meta.json`` (a JSON object with a ``files`` map), then each file: size first, then the hash. An entry
that fails (a file truncated, altered at the same size or missing; ``meta.json`` missing or garbled) is renamed
to ``<name>.corrupt-<UTC time>`` with one ``warning:`` line naming the file, and the caller builds it again. An
entry written before fingerprints were recorded is checked by its content where its kind can (every label of a
property dataset against its property, arrays that load whole) and then gets its fingerprints; otherwise it is
moved aside and built again like a corrupt one.

Single-file caches (the calibration measurements) carry their fingerprint inside: a ``fingerprint`` key with the
size and SHA-256 of the canonical JSON of everything else, checked the same way.

Verification costs about half of loading the arrays (29 ms for the 18 MB of the default ER dataset, against 57 ms
to load it), so every open checks again: nothing is remembered between opens.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy

from engine.errors import GaptuiError
from engine.files import atomic_write_text, fingerprint, mismatch, move_aside, os_error

META = "meta.json"
#: Why a cache without fingerprints is not trusted.
LEGACY = "no fingerprints (written by an older gaptui)"

Warn = Callable[[str], None]
#: Checks the content of an entry written before fingerprints were recorded: ``""`` when right, else why not.
Legacy = Callable[[Path, dict[str, Any]], str]


@dataclass(frozen=True)
class Entry:
    """A folder entry of the store as opened (checked): its id (the folder's name), its path and its ``meta.json``,
    whose ``spec`` says what it holds and ``stats`` what it measured. Each kind of dataset derives from it and adds
    how its data files read (alignment pairs, property graphs, molecules)."""

    id: str
    path: Path
    meta: dict[str, Any]

    @property
    def spec(self) -> dict[str, Any]:
        return self.meta["spec"]  # type: ignore[no-any-return]

    @property
    def stats(self) -> dict[str, Any]:
        return self.meta["stats"]  # type: ignore[no-any-return]


def say_stderr(line: str) -> None:
    """A cache's one-line ``warning:`` to whoever runs the process (the CLI's stderr, a worker's ``stderr.txt``)."""
    print(line, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- folders


def staging_dir(final: Path) -> Path:
    """A fresh temporary sibling of ``final`` to build into (hidden, so cache listings skip it)."""
    return final.parent / f".tmp-{final.name}-{os.getpid()}-{time.monotonic_ns()}"


def publish_dir(tmp: Path, final: Path, *, force: bool = False) -> bool:
    """Rename the finished build ``tmp`` to ``final`` atomically; False when another builder's copy was kept.

    Builds are deterministic, so when ``final`` appeared meanwhile (a concurrent builder won the race) that copy
    is kept and ``tmp`` removed, unless ``force`` asks to replace it.
    """
    if final.exists():
        if not force:
            shutil.rmtree(tmp)
            return False
        shutil.rmtree(final)
    os.replace(tmp, final)
    return True


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON and fsync it (used inside staging folders, which are renamed whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, default=str)
        fh.flush()
        os.fsync(fh.fileno())


def manifest(folder: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"size", "sha256"}}`` of every file under ``folder`` except ``meta.json``."""
    return {name: fingerprint(Path(folder) / name) for name in data_files(folder)}


def data_files(folder: Path) -> list[str]:
    """Relative paths of the files under ``folder`` except ``meta.json``, sorted."""
    folder = Path(folder)
    names = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return sorted(name for name in names if name != META)


def write_entry(final: Path, write: Callable[[Path], dict[str, Any]], *, force: bool = False) -> bool:
    """Build the entry ``final``: ``write(tmp)`` writes the data files into a temporary folder and returns the
    meta (without ``files``); every file is fingerprinted into ``meta.json`` and the folder renamed into place.

    Returns False when another builder's copy was kept (see :func:`publish_dir`).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging_dir(final)
    try:
        tmp.mkdir()
        meta = write(tmp)
        write_json(tmp / META, {**meta, "files": manifest(tmp)})
        return publish_dir(tmp, final, force=force)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def check_entry(
    path: Path, required: Iterable[str] = (), files: Iterable[str] = (), legacy: Legacy | None = None
) -> tuple[dict[str, Any] | None, str]:
    """``(meta, "")`` when the entry at ``path`` matches its fingerprints, else ``(None, why)``, the why naming
    the file. ``required`` lists keys ``meta.json`` must have besides ``files``; ``files`` the data files its
    ``files`` map must list.

    An entry written before fingerprints were recorded fails, unless ``legacy(path, meta)`` checks its content
    (``""`` when it is right): then its fingerprints are recorded now and it is used.
    """
    path = Path(path)
    meta_path = path / META
    try:
        raw = meta_path.read_bytes()
    except FileNotFoundError:
        return None, f"{META}: missing"
    except OSError as exc:
        return None, f"{META}: unreadable ({exc.strerror or exc})"
    try:
        meta = json.loads(raw)
    except ValueError:
        return None, f"{META}: not valid JSON"
    if not isinstance(meta, dict):
        return None, f"{META}: not a JSON object"
    recorded = meta.get("files")
    if recorded is None:
        return _adopt(path, meta, required, files, legacy)
    if not isinstance(recorded, dict) or not recorded or not all(_is_fingerprint(v) for v in recorded.values()):
        return None, f"{META}: 'files' is not a map of file fingerprints"
    lacking = [k for k in required if k not in meta] + [f"files/{f}" for f in files if f not in recorded]
    if lacking:
        return None, f"{META}: lacks {', '.join(lacking)}"
    for name, expected in sorted(recorded.items()):
        if Path(name).is_absolute() or ".." in Path(name).parts:
            return None, f"{META}: file name {name!r} lies outside the entry"
        problem = mismatch(path / name, expected)
        if problem:
            return None, f"{name}: {problem}"
    return meta, ""


def _adopt(
    path: Path, meta: dict[str, Any], required: Iterable[str], files: Iterable[str], legacy: Legacy | None
) -> tuple[dict[str, Any] | None, str]:
    """Check an entry without fingerprints by its content and record them when it passes."""
    if legacy is None:
        return None, f"{META}: {LEGACY}"
    lacking = [k for k in required if k not in meta] + [f for f in files if not (path / f).is_file()]
    if lacking:
        return None, f"{META}: {LEGACY}, and {', '.join(lacking)} missing"
    problem = legacy(path, meta)
    if problem:
        return None, problem
    meta = {**meta, "files": manifest(path)}
    with contextlib.suppress(OSError):  # a read-only cache is still used; it is checked by content again next time
        atomic_write_text(path / META, json.dumps(meta, indent=2, sort_keys=True, default=str))
    return meta, ""


def read_meta(path: Path, required: Iterable[str] = ()) -> dict[str, Any]:
    """The ``meta.json`` of the entry at ``path`` without checking its files (listings, an entry just written);
    a one-line :class:`GaptuiError` when it is missing, garbled or lacks a ``required`` key."""
    meta_path = Path(path) / META
    try:
        meta = json.loads(meta_path.read_bytes())
    except FileNotFoundError:
        raise GaptuiError(f"no cached entry at {path} (missing {META})") from None
    except OSError as exc:
        raise GaptuiError(f"{meta_path}: unreadable ({exc.strerror or exc})") from None
    except ValueError:
        raise GaptuiError(f"{meta_path}: not valid JSON") from None
    lacking = [k for k in required if k not in meta] if isinstance(meta, dict) else ["(not a JSON object)"]
    if lacking:
        raise GaptuiError(f"{meta_path}: lacks {', '.join(lacking)}")
    return meta


def open_entry(
    path: Path,
    what: str,
    *,
    required: Iterable[str] = (),
    files: Iterable[str] = (),
    legacy: Legacy | None = None,
    warn: Warn | None = None,
    then: str = "rebuilding it",
) -> dict[str, Any] | None:
    """The meta of the verified entry at ``path`` (see :func:`check_entry`); None when there is none, or when it
    failed its check: then it was moved aside and ``warn`` (default: stderr) got one line naming ``what``, the
    file and ``then``."""
    path = Path(path)
    if not path.exists():
        return None
    meta, problem = check_entry(path, required, files, legacy)
    if meta is not None:
        return meta
    discard(path, what, problem, warn, then)
    return None


def discard(path: Path, what: str, problem: str, warn: Warn | None = None, then: str = "rebuilding it") -> None:
    """Move the entry (or file) at ``path`` aside and say so in one ``warning:`` line."""
    try:
        aside = move_aside(Path(path))
    except FileNotFoundError:
        return  # a concurrent reader moved it aside first (and said so)
    except OSError as exc:
        raise os_error(exc, f"moving the corrupt {what} {path} aside ({problem})") from None
    (warn or say_stderr)(f"warning: {what} {path} is corrupt ({problem}); moved aside to {aside.name}; {then}")


def _is_fingerprint(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("size"), int) and isinstance(value.get("sha256"), str)


# --------------------------------------------------------------------------------------------- single files


def _canonical_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()


def write_sealed_json(path: Path, obj: dict[str, Any], **dump_args: Any) -> None:
    """Write ``obj`` atomically with a ``fingerprint`` key: size and SHA-256 of the canonical JSON of ``obj``."""
    body = _canonical_bytes(obj)
    sealed = {**obj, "fingerprint": {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}}
    atomic_write_text(Path(path), json.dumps(sealed, default=str, **dump_args))


def check_sealed_json(path: Path) -> tuple[dict[str, Any] | None, str]:
    """``(object without its fingerprint, "")`` when the file at ``path`` matches its fingerprint, else
    ``(None, why)``; ``(None, "")`` when there is no file."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    try:
        obj = json.loads(raw)
    except ValueError:
        return None, "not valid JSON"
    if not isinstance(obj, dict):
        return None, "not a JSON object"
    seal = obj.pop("fingerprint", None)
    if seal is None:
        return None, LEGACY
    if not _is_fingerprint(seal):
        return None, "its fingerprint is garbled"
    body = _canonical_bytes(obj)
    if len(body) != seal["size"]:
        return None, f"{len(body)} bytes of content, expected {seal['size']}"
    if hashlib.sha256(body).hexdigest() != seal["sha256"]:
        return None, "checksum mismatch"
    return obj, ""


def open_sealed_json(path: Path, what: str, *, warn: Warn | None = None, then: str = "rebuilding it") -> dict | None:
    """The verified content of the single-file cache at ``path``; None when there is none, or (after moving it
    aside with one ``warning:`` line) when it fails its check."""
    obj, problem = check_sealed_json(path)
    if problem:
        discard(Path(path), what, problem, warn, then)
    return obj


def content_digest(obj: Any) -> str:
    """SHA-256 hex digest of the canonical JSON of ``obj`` (sorted keys, no spaces): the cache's content hash."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seeded_rng(seed: int, key: dict[str, Any]) -> numpy.random.Generator:
    """A generator determined by ``seed`` and the content of ``key``: distinct specs draw independent streams."""
    words = [int(content_digest(key)[i : i + 8], 16) for i in range(0, 32, 8)]
    return numpy.random.default_rng(numpy.random.SeedSequence([int(seed), *words]))
