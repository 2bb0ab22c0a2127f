"""The command's own process and streams: lines that survive a reader that left, standard streams
closed at start, pydantic plugins left unloaded, and how loud the libraries' logs are."""

from __future__ import annotations

import logging
import os
import sys
import types
from typing import TextIO


def say(text: str, to_stderr: bool = False) -> None:
    """Print a line of a command whose exit code carries its result: a reader that left (or a full
    disk, or a closed stream) does not change that result, nor stop the command half-way
    (`launch stop RUN | head -1`, `launch ... 2>&1 | head`)."""
    stream = sys.stderr if to_stderr else sys.stdout
    if stream is None:  # started with the stream closed (`>&-`)
        return
    try:
        print(text, file=stream, flush=True)
    except OSError:  # EPIPE, ENOSPC, EIO: the line is lost, the result is not
        drop(stream)


def drop(stream: TextIO) -> None:
    from launcher.console import discard  # only once a write failed: rich and pydantic stay off every command's path

    discard(stream)


def open_closed_standard_streams() -> None:
    """`launch ... >&-`: a closed standard descriptor gets /dev/null, before any file the launcher
    opens could take its number (and a task's output land in it), and Python's stream for it."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one, the lower ones being open
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115 - lives as long as the process


def without_pydantic_plugins() -> None:
    """The `launch` process validates only its own spec: pydantic plugins installed beside it (tracing
    and metrics hooks) are not loaded for it. Finding them imports importlib.metadata and reads every
    installed distribution's entry points, ~20 ms of every launch's start, and a broken one would
    break `launch`. Only the command's own process: `import launcher` as a library changes nothing."""
    name = "pydantic.plugin._loader"
    if name not in sys.modules:
        loader = types.ModuleType(name, "pydantic's plugin loader, finding none (launcher/cli/streams.py)")
        loader.get_plugins = lambda: ()  # type: ignore[attr-defined]
        sys.modules[name] = loader


def quiet_libraries(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="[launch] %(levelname)s %(name)s: %(message)s"
    )
    if not verbose:  # paramiko logs what the launcher already says in its own words
        logging.getLogger("paramiko").setLevel(logging.CRITICAL + 1)
