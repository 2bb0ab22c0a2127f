"""Paths a spec names (run_root, checkpoint_dir, workdir): what a file system can hold and a
screen shows, checked before anything is made, and where a run's checkpoints go. Pure and without
pydantic."""

from __future__ import annotations

import posixpath
import re

from worker.contract import RunLayout, is_url

MAX_NAME_BYTES = 255  # one component of a path (NAME_MAX of Linux file systems)


MAX_PATH_BYTES = 3800  # a whole path, leaving PATH_MAX (4096) room for the run's own names under it


# Characters a screen does not show (a soft hyphen, zero-width ones, direction overrides, a BOM): in a
# path, what the launcher and the dry run print would not be the path the tasks use
_UNSEEN_IN_PATH = re.compile(r"[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def brief(value: str) -> str:
    """`value` quoted for a message, cut to its first 80 characters."""
    return repr(value) if len(value) <= 80 else repr(value[:77]) + "..."


def all_visible(value: str) -> str:
    """`value` when every character of it shows on a screen; else ValueError naming the one that does not."""
    unseen = _UNSEEN_IN_PATH.search(value)
    if unseen is not None:
        raise ValueError(
            f"holds U+{ord(unseen.group()):04X}, a character no screen shows, so the path printed would not be the "
            "path used: remove it"
        )
    return value


def path_that_fits(value: str) -> str:
    """`value` when a file system can hold it: no component over 255 bytes, the whole well under PATH_MAX,
    and no character a screen does not show."""
    if not value.strip():
        raise ValueError("is blank: give a directory")
    if value != value.strip():  # pasted with a space or a no-break space: a directory no one meant
        end, blank = ("starts", value[0]) if value[0].isspace() else ("ends", value[-1])
        what = "a space" if blank == " " else f"U+{ord(blank):04X}, a blank character"
        raise ValueError(
            f"{brief(value)} {end} with {what}, which a directory name almost never does on purpose: remove it"
        )
    all_visible(value)
    encoded = value.encode("utf-8", "surrogateescape")
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > MAX_NAME_BYTES:
        raise ValueError(f"has a path component of {longest} bytes; a file system takes at most {MAX_NAME_BYTES}")
    if len(encoded) > MAX_PATH_BYTES:
        raise ValueError(f"is {len(encoded)} bytes long; give a path of at most {MAX_PATH_BYTES}")
    return value


def checkpoint_dir_of(given: str | None, layout: RunLayout, launcher_cwd: str) -> str:
    """Where the run's checkpoints go: the spec's `checkpoint_dir` (relative to the launcher's
    directory; URLs untouched) or the run directory's `checkpoints`."""
    checkpoint_dir = given or layout.default_checkpoint_dir
    if not posixpath.isabs(checkpoint_dir) and not is_url(checkpoint_dir):  # gs://... reaches TF untouched
        checkpoint_dir = posixpath.normpath(posixpath.join(launcher_cwd, checkpoint_dir))
    return checkpoint_dir
