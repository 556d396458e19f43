"""Safe files: atomic writes, size + SHA-256 fingerprints, corrupt files moved aside, advisory locks, and one
guard that turns filesystem errors into one clear line.

Every artefact gaptui caches or resumes from (dataset arrays, checkpoints) is written with a fingerprint; a
reader that finds a mismatch moves the file aside as ``<name>.corrupt-<UTC time>`` (never deletes it) and the
caller rebuilds or restarts from the last good state.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError

#: Read size for hashing (1 MiB).
_CHUNK = 1 << 20


def fingerprint(path: Path) -> dict[str, Any]:
    """``{"size": bytes, "sha256": hex}`` of a file."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def mismatch(path: Path, expected: dict[str, Any]) -> str:
    """Why ``path`` does not match its fingerprint (``""`` when it does). The size is checked before hashing."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    if size != expected.get("size"):
        return f"{size} bytes, expected {expected.get('size')}"
    if fingerprint(path)["sha256"] != expected.get("sha256"):
        return "checksum mismatch"
    return ""


def move_aside(path: Path) -> Path:
    """Rename a corrupt file or folder to ``<name>.corrupt-<UTC time>`` next to it; returns the new path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.replace(path, target)
    return target


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def staged_files() -> Iterator[Callable[[Path], Path]]:
    """Write a group of files all or none: ``stage(path)`` returns the temporary sibling to write ``path``'s content
    to; when the body ends every staged file is fsynced and renamed into place, and when it fails (a full disk) every
    temporary file is removed, so that no file is torn and no part of the group is left to block a rerun. A
    filesystem error names the file it was writing (the final path, not the temporary one)."""
    staged: dict[Path, Path] = {}

    def stage(path: Path) -> Path:
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        staged[tmp] = path
        return tmp

    try:
        yield stage
        for tmp in staged:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for tmp, path in staged.items():
            os.replace(tmp, path)
    except OSError as exc:
        for tmp in staged:
            tmp.unlink(missing_ok=True)
        named = staged.get(Path(exc.filename)) if exc.filename is not None else None
        if (exc.filename is None or named is not None) and exc.errno is not None and staged:
            # write and fsync errors name no file, and a temporary name means nothing to the user
            raise OSError(exc.errno, exc.strerror, str(named or list(staged.values())[-1])) from exc
        raise
    except BaseException:
        for tmp in staged:
            tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a sibling temporary file, fsync it and rename it over ``path`` (never a torn file)."""
    with staged_files() as stage, open(stage(path), "wb") as fh:
        fh.write(data)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) atomically: see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any, **dump_args: Any) -> None:
    atomic_write_text(path, json.dumps(obj, default=str, **dump_args))


def read_user_bytes(path: Path, expected: str) -> bytes:
    """The bytes of a file the user named; a file that cannot be read is one :class:`GaptuiError` line naming it and
    saying what was ``expected`` (e.g. "a preset is a TOML text file")."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise os_error(exc, f"reading it; {expected}") from None


def decode_user_text(data: bytes, path: Path, expected: str) -> str:
    """``data`` of the user's file ``path`` as UTF-8, a byte-order mark (some editors write one) dropped; a file that
    is not text (binary, another encoding) is one :class:`GaptuiError` line naming it and the byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise GaptuiError(f"{path}: not UTF-8 text (byte {exc.start}); {expected}") from None


def read_user_text(path: Path, expected: str) -> str:
    """The text of a file the user named (:func:`read_user_bytes`, :func:`decode_user_text`)."""
    return decode_user_text(read_user_bytes(path, expected), path, expected)


def written_by(folder: Path, manifest: str) -> set[str]:
    """The file names (relative to ``folder``) that its ``manifest`` says the command that owns it wrote."""
    listed = read_json(Path(folder) / manifest)
    files = listed.get("files") if isinstance(listed, dict) else None
    return {str(name) for name in files} if isinstance(files, list) else set()


def refuse_foreign(folder: Path, names: list[str], ours: set[str], command: str) -> None:
    """GaptuiError naming the first of ``names`` that exists in ``folder`` but is not in ``ours`` (a file the user
    has, which ``command`` must not replace without ``--force``)."""
    foreign = [name for name in names if (Path(folder) / name).exists() and name not in ours]
    if foreign:
        raise GaptuiError(
            f"{Path(folder) / foreign[0]} exists and was not written by {command}; "
            "choose another --out folder or pass --force to replace it"
        )


def read_json(path: Path) -> Any:
    """JSON of ``path``; None when the file is missing, unreadable as UTF-8 or not valid JSON."""
    try:
        return json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return None


class FileLock:
    """An exclusive advisory lock (``flock``) on ``path``, held until :meth:`release` or process exit.

    The lock file holds a one-line description of the holder, shown to whoever is refused.
    """

    def __init__(self, path: Path, holder: str) -> None:
        self.path = Path(path)
        self.holder = holder
        self._fh: Any = None

    def acquire(self, blocking: bool = False) -> bool:
        """Take the lock; False when another process holds it and ``blocking`` is False."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")  # noqa: SIM115 - held for the life of the lock
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            fh.close()
            return False
        fh.seek(0)
        fh.truncate()
        fh.write(f"{self.holder} (pid {os.getpid()}, since {time.strftime('%H:%M:%S')})")
        fh.flush()
        self._fh = fh
        return True

    def current_holder(self) -> str:
        try:
            return self.path.read_text().strip() or "another process"
        except OSError:
            return "another process"

    @property
    def held(self) -> bool:
        return self._fh is not None

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


@contextlib.contextmanager
def locked(path: Path, holder: str) -> Iterator[None]:
    """Hold a short exclusive lock on ``path`` for the body of a ``with`` (waits for the current holder)."""
    lock = FileLock(path, holder)
    lock.acquire(blocking=True)
    try:
        yield
    finally:
        lock.release()


def describe_os_error(exc: OSError, action: str = "") -> str:
    """One line for a filesystem error: what failed, where, and why in plain words."""
    reason = (
        {
            errno.ENOSPC: "disk full",
            errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "read-only filesystem",
            errno.EACCES: "permission denied",
            errno.EPERM: "permission denied",
            errno.ENOTDIR: "a path component is a file, not a folder",
            errno.EISDIR: "is a directory",
            errno.ENOENT: "no such file or folder",
            errno.EEXIST: "already exists",
        }.get(exc.errno or 0)
        or exc.strerror
        or str(exc)
        or type(exc).__name__
    )
    where = exc.filename
    if where is None:
        line = reason
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        line = f"{reason} at {where}"
    else:
        line = f"{reason}: {where}"
    return f"{line} (while {action})" if action else line


def os_error(exc: OSError, action: str = "") -> GaptuiError:
    """The :class:`GaptuiError` for a filesystem error (see :func:`describe_os_error`)."""
    return GaptuiError(describe_os_error(exc, action))


def clean_stale_temps(folder: Path, patterns: tuple[str, ...], min_age: float = 0.0) -> list[Path]:
    """Remove temporary files and folders matching ``patterns`` in ``folder`` that no live process owns.

    A name holding ``.<pid>.`` or ``-<pid>-`` of a live process is kept (its writer may still be running).
    """
    import shutil

    removed = []
    if not Path(folder).is_dir():
        return removed
    for pattern in patterns:
        for path in Path(folder).glob(pattern):
            if _owner_alive(path.name) or time.time() - _mtime(path) < min_age:
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _owner_alive(name: str) -> bool:
    for part in name.replace("-", ".").split("."):
        if part.isdigit() and 1 < int(part) < 1 << 22:
            try:
                os.kill(int(part), 0)
                return True
            except ProcessLookupError:
                continue
            except PermissionError:
                return True
    return False
