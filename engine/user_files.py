"""Reading a file the user named (a preset, an edge list, a graph file, a CSV): one opening of such files.

A folder, a FIFO or a device, a file larger than the limit, one that cannot be opened or is not UTF-8 text is one
:class:`~engine.errors.GaptuiError` line naming the file and saying what was expected; nothing waits for a writer.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import GaptuiError
from engine.files import os_error

#: The largest file a command reads whole when the user names it (a preset, an edge list, a graph file, a CSV).
USER_FILE_LIMIT = 1 << 30


@contextlib.contextmanager
def open_user_file(path: Path, expected: str, limit: int = USER_FILE_LIMIT) -> Iterator[tuple[Any, int]]:
    """``(binary file, size)`` of a regular file the user named, of at most ``limit`` bytes: the one opening of such
    files. A folder, a FIFO or a device (``/dev/zero``), a larger file or one that cannot be opened is one
    :class:`GaptuiError` line naming it and saying what was ``expected`` (e.g. "a preset is a TOML text file");
    nothing waits for a writer (a FIFO is opened without blocking)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise os_error(exc, f"reading it; {expected}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise GaptuiError(f"{path}: a folder, not a file; {expected}")
        if not stat.S_ISREG(info.st_mode):
            raise GaptuiError(f"{path}: not a regular file ({_file_kind(info.st_mode)}); {expected}")
        if info.st_size > limit:
            raise GaptuiError(
                f"{path}: {info.st_size:,} bytes, more than the {limit:,} read from such a file; {expected}"
            )
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        try:
            yield fh, info.st_size
        except OSError as exc:
            raise os_error(OSError(exc.errno, exc.strerror, str(path)), f"reading it; {expected}") from None


def read_user_bytes(path: Path, expected: str, limit: int = USER_FILE_LIMIT) -> bytes:
    """The bytes of a regular file the user named (:func:`open_user_file`); nothing beyond ``limit`` is read."""
    with open_user_file(path, expected, limit) as (fh, _size):
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise GaptuiError(f"{path}: grew past the {limit:,} bytes read from such a file while it was read; {expected}")
    return data


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    for test, name in (*kinds, (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


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
