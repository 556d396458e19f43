"""Safe files: atomic writes, size + SHA-256 fingerprints, corrupt files moved aside, advisory locks, and one
guard that turns filesystem errors into one clear line (the user's own files are read by :mod:`engine.user_files`).

Every artefact gaptui caches or resumes from (dataset arrays, checkpoints) is written with a fingerprint; a
reader that finds a mismatch moves the file aside as ``<name>.corrupt-<UTC time>`` (never deletes it) and the
caller rebuilds or restarts from the last good state.

Every command that writes a group of files into a folder the user names (``--out`` of ``figures``, ``report``,
``export`` and ``properties export``) does it through :class:`OutputFolder`: all files or none, a manifest of what
it wrote, and never a user's file replaced without ``--force``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.typed import ascii_count

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


@functools.cache
def new_file_mode() -> int:
    """The mode ``open()`` gives a new file in this process: ``0o666`` less the umask (read once)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def staged_files() -> Iterator[Callable[[Path], Path]]:
    """Write a group of files all or none: ``stage(path)`` returns the temporary sibling to write ``path``'s content
    to; when the body ends every staged file is fsynced and renamed into place, and when it fails (a full disk) every
    temporary file is removed, so that no file is torn and no part of the group is left to block a rerun. A
    filesystem error names the file it was writing (the final path, not the temporary one)."""
    staged: dict[Path, Path] = {}

    def stage(path: Path) -> Path:
        path = Path(path)
        # what a writer of this file killed earlier (SIGKILL, power loss) left behind
        clean_stale_temps(path.parent, (f".{glob.escape(path.name)}.*.tmp",))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        staged[tmp] = path
        return tmp

    try:
        yield stage
        mode = new_file_mode()
        for tmp in staged:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fchmod(fd, mode)  # a library may create its file 0600 (safetensors): as open() would make it
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


def written_by(folder: Path, manifest: str) -> set[str]:
    """The file names (relative to ``folder``) that its ``manifest`` says the command that owns it wrote."""
    return _listed(read_json(Path(folder) / manifest), "files")


def _listed(manifest: Any, key: str) -> set[str]:
    """The names under ``key`` of a manifest, only those that stay inside its folder (a hand-edited manifest
    naming ``../x`` or ``/etc/x`` never makes a command replace or remove a file outside it)."""
    files = manifest.get(key) if isinstance(manifest, dict) else None
    if not isinstance(files, list):
        return set()
    return {str(name) for name in files if isinstance(name, str) and _inside(name)}


def _inside(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and "\\" not in name and all(p not in ("", ".", "..") for p in parts)


def refuse_foreign(folder: Path, names: list[str], ours: set[str], command: str) -> None:
    """GaptuiError naming the first of ``names`` that exists in ``folder`` but is not in ``ours`` (a file the user
    has, which ``command`` must not replace without ``--force``)."""
    foreign = [name for name in names if (Path(folder) / name).exists() and name not in ours]
    if foreign:
        raise GaptuiError(
            f"{Path(folder) / foreign[0]} exists and was not written by {command}; "
            "choose another --out folder or pass --force to replace it"
        )


#: Prefix of the hidden folder a command stages its files in, inside its output folder:
#: ``.gaptui-stage-<command>-<pid>-<random>`` (the pid tells a rerun whether its writer is still alive).
STAGE_PREFIX = ".gaptui-stage-"


def check_out_folder(folder: Path) -> None:
    """GaptuiError when ``folder`` (an ``--out`` the user gave) names a file: the commands write into a folder."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise GaptuiError(f"--out {folder} is a file; --out must be a folder (give a folder to write into)")


class OutputFolder:
    """A group of files one command writes into a folder the user names (``--out``), all or none, never replacing a
    file of the user's, and left either as it was or as the command's own by a kill at any moment.

    ``with OutputFolder(out, manifest, command, force) as dest:`` the body writes each file to ``dest.stage(name)``
    (``name`` relative to ``out``, ``/``-separated) or anywhere under ``dest.stage_folder(sub)``, all inside a hidden
    staging folder in ``out`` (:data:`STAGE_PREFIX`). When the body ends:

    1. a file of the same name that ``manifest`` does not list (the user's) is refused, one :class:`GaptuiError`
       naming it, unless ``force`` (with ``replace_own=False`` every existing file is refused, the command's own
       too, except those an interrupted run of it left half moved in);
    2. every staged file is fsynced, then the manifest is rewritten (atomically) to list the files it had and the new
       ones together: the intent, so that a kill while the files move in leaves only files the manifest claims;
    3. the files are renamed into place, the command's earlier files it no longer writes are removed (those
       ``replaces(name)`` says this run stands for; all by default), and the final manifest is written: ``files``
       and the caller's ``details``.

    A failure in the body (a full disk) removes the staging folder and leaves ``out`` as it was; a filesystem error
    names the file in ``out`` it was writing, never the staging path. A run first removes staging folders (and
    manifest temporaries) its command left in ``out`` when killed, those of no live process; ``leftovers`` adds glob
    patterns of staging folders an earlier version of the command used, removed only where its manifest exists. A
    file ``manifest`` does not list is never touched.
    """

    def __init__(
        self,
        folder: Path,
        manifest: str,
        command: str,
        force: bool = False,
        *,
        replaces: Callable[[str], bool] | None = None,
        replace_own: bool = True,
        leftovers: tuple[str, ...] = (),
    ) -> None:
        self.folder = Path(folder)
        self.manifest = manifest
        self.command = command
        self.force = force
        self.replaces = replaces or (lambda name: True)
        self.replace_own = replace_own
        self.leftovers = leftovers
        #: Extra keys of the final manifest (what the files hold), set by the body.
        self.details: dict[str, Any] = {}
        #: The names written, in ``out``, once the ``with`` block has ended.
        self.names: list[str] = []
        self.staging: Path | None = None
        self._staged: list[str] = []
        slug = re.sub(r"[^a-z0-9]+", "-", command.lower().removeprefix("gaptui ")).strip("-") or "files"
        self.prefix = f"{STAGE_PREFIX}{slug}-"

    # -------------------------------------------------------------------------------------- the manifest

    def _read(self) -> Any:
        return read_json(self.folder / self.manifest)

    @property
    def ours(self) -> set[str]:
        """The names the manifest lists (the command's own files)."""
        return _listed(self._read(), "files")

    def refuse(self, names: Iterable[str]) -> None:
        """Refuse (one :class:`GaptuiError`) an ``out`` that is a file, and, unless ``force``, any of ``names`` that
        exists and may not be replaced. Callable before the ``with`` block, to refuse before any work is done."""
        check_out_folder(self.folder)
        if self.force:
            return
        names = list(names)
        if self.replace_own:
            refuse_foreign(self.folder, names, self.ours, self.command)
            return
        pending = _listed(self._read(), "pending")
        existing = sorted(n for n in names if (self.folder / n).exists() and n not in pending)
        if existing:
            raise GaptuiError(
                f"--out {self.folder}: {self.folder / existing[0]} already exists ({len(existing)} files would be "
                "overwritten; use --force or another folder)"
            )

    def _write_manifest(self, content: dict[str, Any]) -> None:
        atomic_write_text(self.folder / self.manifest, json.dumps(content, indent=2, default=str) + "\n")

    # -------------------------------------------------------------------------------------- staging

    def __enter__(self) -> OutputFolder:
        check_out_folder(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        patterns = (f"{self.prefix}*", f".{self.manifest}.*.tmp")
        if (self.folder / self.manifest).is_file():
            patterns += self.leftovers
        clean_stale_temps(self.folder, patterns)
        self.staging = Path(tempfile.mkdtemp(prefix=f"{self.prefix}{os.getpid()}-", dir=self.folder))
        return self

    def _in_staging(self, name: str) -> Path:
        if self.staging is None:
            raise RuntimeError("OutputFolder.stage() outside its with block")
        if not _inside(name):
            raise ValueError(f"not a name inside the output folder: {name!r}")
        return self.staging / name

    def stage(self, name: str) -> Path:
        """Where to write the file ``name`` (relative to the output folder) while the group is staged."""
        path = self._in_staging(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._staged.append(name)
        return path

    def stage_folder(self, name: str) -> Path:
        """A staged subfolder ``name``: every file written under it moves to ``<out>/<name>/``."""
        path = self._in_staging(name)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            try:
                self._commit()
            except OSError as failure:
                if (named := self._named(failure)) is not None:
                    raise named from failure
                raise
            finally:
                self._discard()
            return False
        self._discard()
        if isinstance(exc, OSError) and (named := self._named(exc)) is not None:
            raise named from exc
        return False

    def _discard(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)

    def _named(self, exc: OSError) -> OSError | None:
        """``exc`` naming the file in the output folder it concerns (None when it needs no change)."""
        if exc.errno is None or self.staging is None:
            return None
        if exc.filename is None:
            # write() and fsync() errors name no file: the one last staged is the one being written
            return OSError(exc.errno, exc.strerror, str(self.folder / self._staged[-1])) if self._staged else None
        for where, staging in ((exc.filename, self.staging), (os.path.abspath(exc.filename), self.staging.absolute())):
            try:
                relative = Path(where).relative_to(staging)
            except ValueError:
                continue
            return OSError(exc.errno, exc.strerror, str(self.folder / relative))
        return None

    # -------------------------------------------------------------------------------------- commit

    def _collect(self) -> list[str]:
        """Every file under the staging folder, those staged by name first (in order), then the others sorted."""
        assert self.staging is not None
        found = {p.relative_to(self.staging).as_posix() for p in self.staging.rglob("*") if not p.is_dir()}
        first = [n for n in dict.fromkeys(self._staged) if n in found]
        return first + sorted(found - set(first))

    def _check_targets(self, names: list[str]) -> None:
        """A folder where a file goes, or a file where a folder goes, is the user's: never replaced, not even with
        ``force``."""
        for name in names:
            target = self.folder / name
            for parent in reversed(target.relative_to(self.folder).parents[:-1]):
                if (self.folder / parent).exists() and not (self.folder / parent).is_dir():
                    raise GaptuiError(f"{self.folder / parent} is a file, not a folder; choose another --out folder")
            if target.is_dir() and not target.is_symlink():
                raise GaptuiError(f"{target} is a folder, not a file; choose another --out folder")

    def _commit(self) -> None:
        assert self.staging is not None
        names = self._collect()
        self.refuse(names)
        self._check_targets(names)
        for name in names:
            try:
                fd = os.open(self.staging / name, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(self.folder / name)) from exc
        ours = self.ours
        new = set(names)
        earlier = sorted(ours - new)
        stale = [n for n in earlier if self.replaces(n)]
        # The intent: once a file moves in, the manifest already claims it (and still claims the old ones).
        self._write_manifest({"files": names + earlier, "pending": names, **self.details})
        folders = {self.folder}
        for name in names:
            target = self.folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.staging / name, target)
            folders.add(target.parent)
        for name in stale:
            target = self.folder / name
            if target.is_symlink() or target.is_file():
                target.unlink(missing_ok=True)
                folders.add(target.parent)
        for folder in folders:
            fsync_dir(folder)
        kept = [n for n in earlier if n not in stale and (self.folder / n).exists()]
        self._write_manifest({"files": names + kept, **self.details})
        self.names = names


def sqlite_url(path: Path, read_only: bool = False) -> str:
    """The SQLAlchemy URL of the SQLite file ``path``, the one way gaptui builds a database URL: every character of
    the path stays itself (a workspace named ``ws%41``, ``a?b`` or ``x#y`` is that folder, never another), and
    ``read_only`` opens it as an SQLite URI with ``mode=ro``, which never creates a file. Braces are
    percent-encoded too: Optuna fills its URL as a ``str.format`` template."""
    from urllib.parse import quote

    from sqlalchemy.engine import URL

    database, query = str(Path(path).absolute()), {}
    if read_only:
        database, query = "file:" + quote(database), {"mode": "ro", "uri": "true"}
    url = URL.create("sqlite", database=database, query=query).render_as_string(hide_password=False)
    return url.replace("{", "%7B").replace("}", "%7D")


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
        pid = ascii_count(part)
        if pid is not None and 1 < pid < 1 << 22:
            try:
                os.kill(pid, 0)
                return True
            except ProcessLookupError:
                continue
            except PermissionError:
                return True
    return False
