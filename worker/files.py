"""Writing a file so that no reader ever sees half of it and no planted name can redirect it.

`write_atomic` writes a random temporary name in the same directory (O_CREAT|O_EXCL|O_NOFOLLOW:
never an existing file, never through a symlink), syncs it and renames it over the target (a
rename replaces a symlink at the target, it does not follow it). Stdlib only: the worker runtime,
the launcher and the bundle all write through it.
"""

from __future__ import annotations

import os
import secrets

__all__ = ["FILE_MODE", "new_temporary", "write_atomic"]

FILE_MODE = 0o600
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def new_temporary(target: str, mode: int = FILE_MODE) -> tuple[int, str]:
    """A new file beside `target` under a random name, created by us alone: (fd, its path)."""
    directory, name = os.path.split(os.path.abspath(target))
    while True:
        temporary = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(temporary, _FLAGS, mode), temporary
        except FileExistsError:  # 64 random bits already taken: draw again
            continue


def write_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int = FILE_MODE, durable: bool = True) -> None:
    """Replace `path` with `data` in one step; the file is created with `mode` (0600 by default).

    `durable=False` skips the sync, for a file rewritten every second that only shows the present
    (a sync can take tens of milliseconds on a busy disk): a reader still sees the old or the new
    whole file, and only a crash of the machine itself can lose the last version."""
    target = os.fspath(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, temporary = new_temporary(target, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:  # renamed already, or never written
            pass
        raise
