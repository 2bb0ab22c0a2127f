"""Files and directories only their owner can read: logs and summaries hold whatever a task printed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private_dir(path: str | Path) -> None:
    """Create `path` (and missing parents) as 0700; an existing directory keeps its mode."""
    path = Path(path)
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made meanwhile by another thread
            continue


def open_private(path: str | Path, mode: str, **kwargs: Any) -> IO[Any]:
    """open() whose newly created file is 0600 (the umask can only make it stricter), never through
    a symlink planted at `path` (ELOOP instead)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    return os.fdopen(fd, mode, **({"buffering": 0} if "b" in mode else {}) | kwargs)
