"""The preflight probe: answers questions about the host the agent runs on (`handle`).

The host agent answers each `probe` command with `handle(request)`, on remote and local hosts
alike, through one table (PROBES) keyed by the request's `op`; the requests are described in
launcher/agent/protocol.py. `info` reports what the host has: python and TensorFlow
(launcher/agent/host_python.py), the directories, the tasks' programs, nvidia-smi's raw answers
(parsed by launcher.preflight.gpus); the markers tell whether a checkpoint directory is shared;
`bind`, `connect` and `release` are the network checks (launcher/agent/network.py). Standard
library only; it never imports TensorFlow (metadata lookups are enough and take milliseconds).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, cast

from launcher.agent import network
from launcher.agent.host_python import (
    _package_without_main,
    _script_problem,
    function_missing,
    host_facts,
    module_found,
    not_runnable,
    worker_fact,
)
from launcher.agent.processes import which
from launcher.agent.protocol import Answer, InfoRequest, MarkerRequest
from launcher.agent.safe_paths import unsafe_ancestry
from worker.contract import is_url

_created: list[str] = []  # directories write_marker made; "remove" takes them away again


def creatable(path: str) -> bool:
    """Whether `path` is a writable directory, or could be made as one (nothing is created). A
    symbolic link to nothing cannot be made as one: makedirs finds it there."""
    path = os.path.abspath(os.path.expanduser(path))
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def dangling_link(path: str) -> str | None:
    """`path`, or the directory above it, as a symbolic link to nothing: "LINK -> TARGET"; else None."""
    path = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(path):
        if os.path.islink(path):
            return f"{path} -> {os.readlink(path)}"
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return None


def foreign_owner(path: str) -> str | None:
    """Why an existing checkpoint directory is not safe to restore from: another user's, or one
    anybody may write to (a planted checkpoint would be restored); None when it is ours or absent."""
    above = unsafe_ancestry(path)
    if above is not None:  # another user could swap it, before or after this check
        return f"is not safe: {above}"
    try:
        info = os.stat(path)
    except OSError:  # not there (yet): the run makes it, as its own
        return None
    if info.st_uid not in (os.geteuid(), 0):
        return f"belongs to uid {info.st_uid}, not to the task's user (uid {os.geteuid()})"
    if info.st_mode & 0o002:  # sticky or not: anybody may add a file there
        return f"is writable by anybody (mode {info.st_mode & 0o7777:04o})"
    return None


def _make_dirs(path: str) -> None:
    missing = []
    while path and not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        os.mkdir(directory)
        _created.append(directory)


def _info(request: InfoRequest) -> Answer:
    facts = host_facts()
    workdir = os.path.expanduser(request.get("workdir") or ".")
    checkpoint_dir = os.path.join(workdir, os.path.expanduser(request.get("checkpoint_dir") or ""))
    url = is_url(request.get("checkpoint_dir") or "")
    answer: dict[str, Any] = {
        **{key: facts[key] for key in ("hostname", "python", "executable", "tensorflow")},
        "workdir_ok": os.path.isdir(workdir),
        "workdir_exists": os.path.exists(workdir),
        "workdir_path": os.path.abspath(workdir),
        # an object store is TensorFlow's to reach; a directory may be made by the run itself
        "checkpoint_url": url,
        "checkpoint_ok": url or creatable(checkpoint_dir),
        "checkpoint_dangling": None if url else dangling_link(checkpoint_dir),
        "checkpoint_unsafe": None if url else foreign_owner(checkpoint_dir),
    }
    pythonpath = request.get("pythonpath")  # the spec's, else what the tasks inherit from this agent
    pythonpath = os.environ.get("PYTHONPATH", "") if pythonpath is None else pythonpath
    if request.get("need_worker"):
        answer["worker_ok"] = worker_fact()
    marks = request.get("runtime_marks")
    if marks:
        shadows = runtime_shadows(pythonpath, workdir, marks)
        if shadows:
            answer["runtime_shadowed"] = shadows
    path = request.get("path")
    missing = {
        program: why
        for program in request.get("programs") or []
        if (why := not_runnable(program, os.environ.get("PATH", os.defpath) if path is None else path, workdir))
    }
    if missing:
        answer["programs_missing"] = missing
    unrunnable = {s: why for s in request.get("scripts") or [] if (why := _script_problem(os.path.join(workdir, s)))}
    if unrunnable:
        answer["scripts_unrunnable"] = unrunnable
    extra = [os.path.join(workdir, p) for p in pythonpath.split(os.pathsep) if p]
    answer.update(_modules(request, [workdir, *extra]))
    startup_env = request.get("startup_env") or {}
    if startup_env:
        failed = _python_fails_with(startup_env, workdir)
        if failed:
            answer["startup_env_fails"] = failed
    if request.get("gpus"):
        answer["gpus"] = _nvidia_smi()
    return answer


def _modules(request: InfoRequest, first: list[str]) -> Answer:
    """The spec's `module:function` targets and a command's `-m` modules that are not there (found from
    `first`, the working directory and PYTHONPATH, then the python's own packages; never imported)."""
    answer: Answer = {}
    unfound = [m for m in request.get("modules") or [] if not module_found(m, first)]
    if unfound:
        answer["modules_missing"] = unfound
    commanded = [m for m in request.get("command_modules") or [] if not module_found(m, first)]
    if commanded:
        answer["command_modules_missing"] = commanded
    mainless = [
        m for m in request.get("command_modules") or [] if m not in commanded and _package_without_main(m, first)
    ]
    if mainless:
        answer["command_packages_without_main"] = mainless
    absent = {
        target: close
        for target in request.get("functions") or []
        if target.partition(":")[0] not in unfound and (close := function_missing(target, first)) is not None
    }
    if absent:
        answer["functions_missing"] = absent
    return answer


# The built-in runtime's own packages: one of that name on PYTHONPATH whose python files are all the
# launcher's own (a checkout of this very version) is no stand-in.
RUNTIME_PACKAGES = ("worker", "tflaunch")


def package_digest(folder: str) -> str:
    """sha256 over every python file of the package at `folder` (relative path and content, sorted)."""
    import hashlib

    digest = hashlib.sha256()
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found += [os.path.join(root, f) for f in files if f.endswith(".py")]
    for path in sorted(found):
        digest.update(os.path.relpath(path, folder).encode() + b"\0")
        try:
            with open(path, "rb") as handle:
                digest.update(handle.read())
        except OSError:
            digest.update(b"\0unreadable")
    return digest.hexdigest()


def runtime_shadows(pythonpath: str, workdir: str, marks: dict[str, str]) -> dict[str, str]:
    """The runtime's packages that a module on the tasks' PYTHONPATH would stand in for: {name: the
    file or package python would import}. `marks`: {package: package_digest of the launcher's own}.
    PYTHONPATH comes before the installed packages, and an empty or relative entry names the working
    directory (`export PYTHONPATH=$PYTHONPATH:/x` with none set gives one); `-P` keeps only the
    script's own directory off sys.path."""
    import importlib.machinery

    endings = (".py", ".pyc", *importlib.machinery.EXTENSION_SUFFIXES)
    found: dict[str, str] = {}
    for entry in pythonpath.split(os.pathsep) if pythonpath else ():  # set but empty: no entry at all
        folder = os.path.join(workdir, entry)
        for name in RUNTIME_PACKAGES:
            if name in found or name not in marks:
                continue
            package = os.path.join(folder, name)
            if os.path.isfile(os.path.join(package, "__init__.py")):
                ours = package_digest(package) == marks[name]
                found[name] = "" if ours else os.path.normpath(package)  # ours first: nothing later stands in
            elif module := next((package + e for e in endings if os.path.isfile(package + e)), None):
                found[name] = os.path.normpath(module)
    return {name: where for name, where in found.items() if where}


STARTUP_CHECK_TIMEOUT_S = 20.0  # within the launcher's 30 s for an answer, so that its words reach it


def _python_fails_with(env: dict[str, str], workdir: str) -> str | None:
    """What this python says when it starts with the tasks' start-up variables (PYTHONHOME, LD_PRELOAD, ...),
    as a task would; None when it starts."""
    import subprocess

    try:
        done = subprocess.run(
            # not from the working directory: a json.py there is the user's, and the preflight runs none of it
            [sys.executable, "-c", "import sys; sys.path = [p for p in sys.path if p]; import encodings, json"],
            env={**os.environ, **env},
            cwd=workdir if os.path.isdir(workdir) else None,
            capture_output=True,
            timeout=STARTUP_CHECK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"it did not start within {STARTUP_CHECK_TIMEOUT_S:g} s"
    except OSError as error:
        return error.strerror or str(error)
    if done.returncode == 0:
        return None
    said = [line.strip() for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    telling = [line for line in said if "error" in line.lower()] or said
    return f"exit {done.returncode}: " + " / ".join(telling[-2:])[:300]


NVIDIA_SMI_TIMEOUT_S = 10.0
GPU_QUERY = "--query-gpu=index,uuid,name,driver_version,memory.total"
_MAX_OUTPUT = 65536


def _run_nvidia_smi(path: str, args: list[str]) -> dict[str, Any]:
    """One bounded nvidia-smi call: its exit code and output, or why it gave none (a hung driver never answers)."""
    import subprocess

    try:
        proc = subprocess.Popen([path, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as error:
        return {"error": error.strerror or str(error)}
    try:
        stdout, stderr = proc.communicate(timeout=NVIDIA_SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.communicate(timeout=1)
        except subprocess.TimeoutExpired:  # stuck in the driver (uninterruptible): leave it, never wait on it
            pass
        return {"timeout": NVIDIA_SMI_TIMEOUT_S}
    return {
        "code": proc.returncode,
        "stdout": stdout[:_MAX_OUTPUT].decode("utf-8", "replace"),
        "stderr": stderr[:_MAX_OUTPUT].decode("utf-8", "replace"),
    }


def _nvidia_smi() -> dict[str, Any]:
    """What nvidia-smi says about this host's GPUs, unparsed: the GPU list as CSV and the plain
    header (the only place it prints the CUDA version). In a Slurm step the spec's GPU ids are
    slots of the step's CUDA_VISIBLE_DEVICES, so that is reported too."""
    path = which("nvidia-smi")
    answer: dict[str, Any] = {"path": path}
    if os.environ.get("SLURM_STEP_ID") is not None:
        answer["slurm_step_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    if path is None:
        return answer
    answer["query"] = _run_nvidia_smi(path, [GPU_QUERY, "--format=csv,noheader,nounits"])
    if answer["query"].get("code") == 0:
        answer["header"] = _run_nvidia_smi(path, [])
    return answer


def _write_marker(request: MarkerRequest) -> Answer:
    path = request.get("path", "")
    _make_dirs(os.path.dirname(path))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(request["token"])
    return {"ok": True}


def _read_marker(request: MarkerRequest) -> Answer:
    try:
        with open(request.get("path", ""), encoding="utf-8") as handle:
            return {"token": handle.read()}
    except OSError as error:
        return {"token": None, "error": error.strerror}


def _remove(request: MarkerRequest) -> Answer:
    try:
        os.remove(request.get("path", ""))
    except OSError:  # already gone, or never written
        pass
    while _created:
        try:
            os.rmdir(_created.pop())
        except OSError:  # something else was put there meanwhile: leave it
            break
    return {"ok": True}


# Each probe request of launcher/agent/protocol.py, and what answers it.
PROBES: dict[str, Callable[[Any], Answer]] = {
    "info": _info,
    "write_marker": _write_marker,
    "read_marker": _read_marker,
    "remove": _remove,
    "bind": lambda request: network.bind([int(p) for p in request.get("ports", [])]),
    "connect": lambda request: network.connect(request.get("addresses", []), float(request.get("timeout", 3))),
    "release": lambda request: network.release(),
}


def handle(request: Mapping[str, Any]) -> Answer:
    op = request.get("op")
    answer = PROBES.get(str(op))
    return {"error": f"unknown op {op!r}"} if answer is None else answer(cast(Any, request))
