"""What a post-mortem of a run needs: kept at launch, packed by `launch bundle RUN_DIR` into one archive.

At launch, once the preflight passed, `write_launch_record` keeps two files in the run directory:
`spec.json` (the spec, secret values masked) and `preflight.json` (what every host reported:
python, TensorFlow, GPUs, driver and CUDA versions). `make_bundle` packs into one tar.gz the
summary, the status, those two files, the metrics and evaluation rows, the Slurm job's script and
output, every attempt's logs, result, error and stack files, and a `bundle.json` with the versions of
this machine and a list of what was left out. It never packs checkpoints, model exports or
TensorBoard events (their size; they stay where they are), never follows a symbolic link, and
masks secret values in every spec it packs. It reads the run directory and writes only the archive.
"""

from __future__ import annotations

import io
import json
import os
import platform
import stat
import time
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import TYPE_CHECKING, Any

from launcher import __version__
from launcher.common.errors import UsageError
from launcher.common.log_reading import read_end
from launcher.common.masking import redact
from launcher.rundir.lock import is_run_dir
from launcher.rundir.status import no_run_files, not_a_run_dir
from launcher.spec.masked import masked_spec, recorded_spec
from worker.contract import RunLayout
from worker.files import new_temporary, write_atomic

if TYPE_CHECKING:
    import tarfile

    from launcher.preflight.check import PreflightReport
    from launcher.spec.models import ClusterSpec

# Top-level files of a run directory that go into a bundle; everything in attempt-N/ goes too.
_TOP_LEVEL = ("summary.json", "status.json", "spec.json", "preflight.json", "metrics.jsonl", "eval.jsonl")
_SLURM = ("submit.sbatch", "slurm-*.out")
_SPEC_COPIES = ("spec.json", "submitted-spec.json")  # specs written by launch: masked again on the way in
MAX_PACKED_BYTES = 8 * 2**20  # per file: a bundle is for reading, and the end of a log holds the failure
_SMALL_FILE = 16 * 2**20  # a spec or preflight.json the launcher wrote is far smaller


class BundleError(UsageError):
    """RUN_DIR is not a run directory, or the archive cannot be written where asked."""


@dataclass(frozen=True)
class BundleResult:
    path: str
    size: int
    members: int
    left_out: list[str]


def _write_json(path: str, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def write_launch_record(spec: ClusterSpec, report: PreflightReport, run_dir: str) -> None:
    """Keep the spec (secrets masked) and the preflight's findings in the run directory, for a post-mortem.

    The run directory exists already: the launch made it, private, just before."""
    layout = RunLayout(run_dir)
    _write_json(layout.spec_file, recorded_spec(spec))
    found = {"time": time.time(), "passed": report.ok, "lines": report.lines, "problems": report.problems}
    _write_json(layout.preflight_file, {**found, "hosts": report.hosts})


def _versions(run_dir: str) -> dict[str, Any]:
    """This machine's versions, and each host's as its preflight recorded them (the launcher never imports TF)."""
    versions: dict[str, Any] = {
        "launcher": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:  # a regular file only: a FIFO planted there would hang, a link would copy another file
        hosts = json.loads(read_end(RunLayout(run_dir).preflight_file, _SMALL_FILE)).get("hosts") or []
    except (OSError, ValueError, AttributeError):  # no preflight.json (an older run, a Slurm submit dir): no hosts
        hosts = []
    versions["hosts"] = [
        {
            "address": host.get("address"),
            "python": host.get("python"),
            "tensorflow": host.get("tensorflow"),
            **(
                {"nvidia_driver": host["gpus"].get("driver"), "cuda": host["gpus"].get("cuda")}
                if isinstance(host.get("gpus"), dict)
                else {}
            ),
        }
        for host in hosts
        if isinstance(host, dict)
    ]
    return versions


def _selected(run_dir: str) -> tuple[list[str], list[str]]:
    """(files to pack, relative to run_dir; top-level entries left out)."""
    chosen: list[str] = []
    left_out: list[str] = []
    for name in sorted(os.listdir(run_dir)):
        path = os.path.join(run_dir, name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:  # a live run's *.tmp, renamed into place since the listing
            continue
        if RunLayout.attempt_of(name) is not None and stat.S_ISDIR(info.st_mode):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for file in sorted(files):
                    full = os.path.join(root, file)
                    relative = os.path.relpath(full, run_dir)
                    try:
                        mode = os.lstat(full).st_mode
                    except FileNotFoundError:  # as above: gone since the listing
                        continue
                    if stat.S_ISREG(mode):
                        chosen.append(relative)
                    else:  # a link could point anywhere: never followed
                        left_out.append(f"{relative} (not a regular file)")
        elif stat.S_ISREG(info.st_mode) and (
            name in _TOP_LEVEL or name in _SPEC_COPIES or any(fnmatch(name, p) for p in _SLURM)
        ):
            chosen.append(name)
        elif name != os.path.basename(RunLayout(run_dir).lock_file):  # the launch's lock: nothing in it to see
            left_out.append(name + ("/" if stat.S_ISDIR(info.st_mode) else ""))
    return chosen, left_out


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    import tarfile

    member = tarfile.TarInfo(name)
    member.size = len(data)
    member.mtime = int(mtime)
    member.mode = 0o600
    archive.addfile(member, io.BytesIO(data))


def default_output(run_dir: str) -> str:
    name = os.path.basename(os.path.abspath(run_dir))
    return os.path.abspath(f"{name}-bundle-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz")


def make_bundle(run_dir: str, output: str | None = None) -> BundleResult:
    """Pack the run's post-mortem files into one tar.gz (never checkpoints or models); see the module docstring."""

    if not os.path.isdir(run_dir):
        raise BundleError(not_a_run_dir(run_dir))
    if not is_run_dir(run_dir):
        raise BundleError(no_run_files(run_dir))
    output = os.path.abspath(output or default_output(run_dir))
    if os.path.isdir(output):
        raise BundleError(f"{output} is a directory; give -o the archive's file name (e.g. {output}/bundle.tar.gz).")
    if os.path.exists(output):
        raise BundleError(f"{output} already exists; remove it or give another file with -o.")
    if not os.path.isdir(os.path.dirname(output)):
        raise BundleError(f"{output}: its directory does not exist; create it or give another file with -o.")
    root = f"{os.path.basename(os.path.abspath(run_dir))}-bundle"
    import tarfile  # only a bundle needs it: not loaded by every launch

    chosen, left_out = _selected(run_dir)
    packed: list[str] = []
    fd, tmp = new_temporary(output)
    try:
        with os.fdopen(fd, "wb") as handle, tarfile.open(fileobj=handle, mode="w:gz") as archive:
            for relative in chosen:
                path = os.path.join(run_dir, relative)
                try:
                    if relative in _SPEC_COPIES:
                        _add_masked_spec(archive, path, f"{root}/{relative}")
                    else:
                        _add_redacted(archive, path, f"{root}/{relative}", left_out)
                    packed.append(relative)
                except ValueError:  # cut short or foreign: its raw text might hold secrets
                    left_out.append(f"{relative} (not valid JSON; left out so that no secret slips through)")
                except OSError as error:  # removed or unreadable meanwhile: say so, pack the rest
                    left_out.append(f"{relative} ({error.strerror or error})")
            manifest = {
                "run_dir": os.path.abspath(run_dir),
                "created": time.time(),
                "versions": _versions(run_dir),
                "files": packed,
                "left_out": left_out,
                "never_packed": "checkpoints, model exports, TensorBoard events",
            }
            _add_bytes(archive, f"{root}/bundle.json", (json.dumps(manifest, indent=2) + "\n").encode(), time.time())
        os.link(tmp, output)  # never replaces a file that appeared at `output` meanwhile
        os.unlink(tmp)
    except FileExistsError:
        os.remove(tmp)
        raise BundleError(f"{output} appeared while the archive was written; nothing was overwritten.") from None
    except OSError as error:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise BundleError(f"{output}: cannot write the archive ({error.strerror or error}).") from None
    return BundleResult(output, os.path.getsize(output), len(packed) + 1, left_out)


def _add_redacted(archive: tarfile.TarFile, path: str, name: str, notes: list[str]) -> None:
    """A text file of the run (a log, the summary), secrets masked again on the way in; of a file
    over MAX_PACKED_BYTES only the tail is packed, where the end of a run is."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(0, "not a regular file")
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_PACKED_BYTES:
            handle.seek(size - MAX_PACKED_BYTES)
            handle.readline()  # from the first whole line
            notes.append(f"{os.path.basename(name)}: only its last {MAX_PACKED_BYTES // 2**20} MiB (of {size} bytes)")
        text = handle.read().decode("utf-8", "surrogateescape")
    data = redact(text).encode("utf-8", "surrogateescape")
    _add_bytes(archive, name, data, os.path.getmtime(path))


def _add_masked_spec(archive: tarfile.TarFile, path: str, name: str) -> None:
    """A spec copy, masked again on the way in (raises ValueError when it is not JSON)."""
    data = masked_spec(json.loads(read_end(path, _SMALL_FILE)))  # "" (not a regular file): ValueError
    _add_bytes(archive, name, (json.dumps(data, indent=2) + "\n").encode(), os.path.getmtime(path))
