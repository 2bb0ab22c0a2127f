"""The preflight probe: answers questions about the host the agent runs on (`handle`).

The host agent answers each `probe` command with `handle(request)`, on remote and local hosts
alike. Standard library only; it never imports TensorFlow (metadata lookups are enough and
take milliseconds). Requests and their answers:

    {"op": "info", "workdir": ..., "checkpoint_dir": ..., "need_worker": true, "gpus": true,
     "programs": [...], "path": ...}     "gpus": also nvidia-smi's raw answers (parsed by launcher.preflight.gpus);
                                         "programs": why each task's program cannot run (PATH: "path")
                                         "functions": module:function targets whose module plainly lacks it
                                         "command_modules": the modules of `python -m MODULE` commands
    {"op": "write_marker" | "read_marker" | "remove", "path": ..., "token": ...}
    {"op": "bind", "ports": [...]}       keeps listeners open until "release" or end of input
    {"op": "connect", "addresses": [["host", port], ...], "timeout": 3}
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
from typing import Any

from launcher.agent.module_names import top_level_names
from launcher.agent.safe_paths import unsafe_ancestry
from launcher.agent.spawn import exec_path, exec_refusal, read_head, shebang
from worker.contract import is_url

_listeners: list[socket.socket] = []
_wakes: list[int] = []  # write ends of the pipes that end each `bind`'s accepting thread
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


_TF_DISTRIBUTIONS = ("tensorflow", "tensorflow_cpu", "tf_nightly")


def _site_dirs() -> list[str]:
    """Where this interpreter installs packages, computed without processing them (no .pth files).
    A virtual environment's, too: without site, python does not apply its pyvenv.cfg (sys.prefix is
    the base python's), so it is read here as site.venv() reads it."""
    import site

    venv = _venv_prefix()
    if venv is None:
        dirs = list(site.getsitepackages())
        if site.ENABLE_USER_SITE is not False:
            dirs.append(site.getusersitepackages())
    else:
        prefix, system_site = venv
        dirs = list(site.getsitepackages([prefix]))
        if system_site:
            dirs += [*site.getsitepackages(), site.getusersitepackages()]
    return [d for d in dirs if os.path.isdir(d)]


def _venv_prefix() -> tuple[str, bool] | None:
    """The virtual environment this python belongs to, and whether it sees the base python's
    packages; None outside one (or when site already applied it: sys.prefix is the venv then)."""
    if sys.prefix != sys.base_prefix:
        return None
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    prefix = os.path.dirname(exe_dir)
    for conf in (os.path.join(exe_dir, "pyvenv.cfg"), os.path.join(prefix, "pyvenv.cfg")):
        try:
            with open(conf, encoding="utf-8") as handle:
                lines = handle.read(65536).splitlines()
        except OSError:
            continue
        system_site = any(
            key.strip().lower() == "include-system-site-packages" and value.strip().lower() == "true"
            for key, sep, value in (line.partition("=") for line in lines)
            if sep
        )
        return prefix, system_site
    return None


def _tensorflow_in(directories: list[str]) -> str | None:
    """TensorFlow's version from a `*.dist-info` next to its package in `directories`, or None."""
    for directory in directories:
        if not os.path.isdir(os.path.join(directory, "tensorflow")):
            continue
        for entry in sorted(os.listdir(directory)):
            name, _, rest = entry.partition("-")
            if entry.endswith(".dist-info") and name.lower() in _TF_DISTRIBUTIONS:
                return rest[: -len(".dist-info")]
    return None


def _worker_in(directories: list[str]) -> bool:
    return any(os.path.isfile(os.path.join(d, "worker", "runtime.py")) for d in directories)


_site_ran: list[bool] = []


def _run_site() -> None:
    """The probe starts without site (`-S`: a quarter of the start-up on a host with many
    packages); run it once when a lookup needs what .pth files add (editable installs, hooks)."""
    import site

    if sys.flags.no_site and not _site_ran:
        site.main()
        _site_ran.append(True)


def _version(*names: str) -> str | None:
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _tensorflow_version() -> str | None:
    import importlib.util

    found = _tensorflow_in(_site_dirs() + [p for p in sys.path if p])
    if found is not None:
        return found
    _run_site()
    return _version("tensorflow", "tensorflow-cpu", "tf-nightly") if importlib.util.find_spec("tensorflow") else None


def _worker_importable() -> bool:
    import importlib.util

    if _worker_in(_site_dirs() + [p for p in sys.path if p]):  # the runtime starts with -P: never the cwd
        return True
    _run_site()
    try:
        return importlib.util.find_spec("worker.runtime") is not None
    except ImportError:
        return False


_facts_lock = threading.Lock()
_facts: dict[str, Any] = {}


def host_facts() -> dict[str, Any]:
    """What every `info` answer says of this host whatever it asks (the lookups take tens of
    milliseconds); found once. The agent calls it as soon as it starts, while the launcher is still
    validating the spec, so that the preflight's first question is answered at once."""
    with _facts_lock:
        if not _facts:
            _facts.update(
                hostname=socket.gethostname(),
                python=python_version(),
                executable=sys.executable,
                tensorflow=_tensorflow_version(),
            )
        return dict(_facts)


def python_version() -> str:
    """As platform.python_version() says it, without platform's import (paid on every host of a fleet)."""
    return sys.version.split()[0]


def worker_fact() -> bool:
    """Whether the built-in runtime imports here; looked up once, and only when an `info` asks (a
    command training never needs it, and where the project is an editable install the lookup runs
    site and importlib.metadata: a third of an agent's start-up, on every host of a fleet)."""
    with _facts_lock:
        if "worker_ok" not in _facts:
            _facts["worker_ok"] = _worker_importable()
        return bool(_facts["worker_ok"])


def _info(request: dict[str, Any]) -> dict[str, Any]:
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
    unfound = [m for m in request.get("modules") or [] if not module_found(m, [workdir, *extra])]
    if unfound:
        answer["modules_missing"] = unfound
    commanded = [m for m in request.get("command_modules") or [] if not module_found(m, [workdir, *extra])]
    if commanded:
        answer["command_modules_missing"] = commanded
    mainless = [
        m
        for m in request.get("command_modules") or []
        if m not in commanded and _package_without_main(m, [workdir, *extra])
    ]
    if mainless:
        answer["command_packages_without_main"] = mainless
    absent = {
        target: close
        for target in request.get("functions") or []
        if target.partition(":")[0] not in unfound
        and (close := function_missing(target, [workdir, *extra])) is not None
    }
    if absent:
        answer["functions_missing"] = absent
    startup_env = request.get("startup_env") or {}
    if startup_env:
        failed = _python_fails_with(startup_env, workdir)
        if failed:
            answer["startup_env_fails"] = failed
    if request.get("gpus"):
        answer["gpus"] = _nvidia_smi()
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


STARTUP_CHECK_TIMEOUT_S = 30.0


def _python_fails_with(env: dict[str, str], workdir: str) -> str | None:
    """What this python says when it starts with the tasks' start-up variables (PYTHONHOME, LD_PRELOAD, ...),
    as a task would; None when it starts."""
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-c", "import encodings, json"],
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


def _script_problem(path: str) -> str | None:
    """Why python could not run `path` as a script (None: it can): a readable file, or a directory
    or zip archive with a __main__ (source or bytecode) at its top, as runpy looks for it."""
    mains = ("__main__.py", "__main__.pyc")
    if os.path.isdir(path):
        return None if any(os.path.isfile(os.path.join(path, m)) for m in mains) else "a directory without __main__.py"
    if not os.path.exists(path):
        return "no such file"
    if not os.access(path, os.R_OK):
        return "not readable"
    import zipfile

    try:
        if not zipfile.is_zipfile(path):
            return None
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (OSError, zipfile.BadZipFile):  # python will say what it finds there
        return None
    return None if names.intersection(mains) else "a zip archive without __main__.py"


def module_found(name: str, first: list[str]) -> bool:
    """Whether the worker runtime could import module `name` (dotted) from the directories `first`
    (the working directory, PYTHONPATH) or this python's packages, found without running any of it:
    each package's location is read from its spec, no `__init__` is executed. A name under a plain
    module (os.path) is taken as found: only running that module could tell."""
    return _locate(name, first)[0]


def _package_without_main(name: str, first: list[str]) -> bool:
    """Whether `python -m name` names a regular package that has no `__main__` module (python then
    refuses: "is a package and cannot be directly executed")."""
    found, origin = _locate(name, first)
    return (
        found
        and origin is not None
        and os.path.basename(origin) == "__init__.py"
        and not module_found(f"{name}.__main__", first)
    )


def function_missing(target: str, first: list[str]) -> list[str] | None:
    """For a `module:function` target whose module is a source file that plainly binds no such
    top-level name, the names it does bind that come close (maybe none); None when the function may
    be there (or only running the module could tell)."""
    import difflib

    module, _, function = target.partition(":")
    found, origin = _locate(module, first)
    if not (found and origin and origin.endswith(".py") and function.isidentifier()):
        return None
    names = top_level_names(origin)
    if names is None or function in names:
        return None
    if os.path.basename(origin) == "__init__.py" and module_found(f"{module}.{function}", first):
        return None  # a submodule, which the package may import
    return difflib.get_close_matches(function, sorted(n for n in names if not n.startswith("__")), n=3)


def _locate(name: str, first: list[str]) -> tuple[bool, str | None]:
    """Whether module `name` is found (as module_found) and, when its spec says, the file it would be loaded from."""
    from importlib.machinery import PathFinder

    parts = name.split(".")
    if not all(part.isidentifier() for part in parts) or (len(parts) > 1 and parts[-1] == "py"):
        return False, None  # `mod.py` is a file's name: python -m and import take `mod`
    roots = [*first, *_site_dirs(), *(p for p in sys.path if p)]
    if len(parts) > 1:  # a package split across roots (pkgutil.extend_path, old-style namespaces) imports too
        spread = [os.path.join(root, *parts[:-1]) for root in roots]
        split = PathFinder.find_spec(parts[-1], [d for d in spread if os.path.isdir(d)])
        if split is not None:
            return True, split.origin
    spec = PathFinder.find_spec(parts[0], roots)
    if spec is None:
        import importlib.util

        _run_site()  # an editable install's path or finder comes from a .pth file
        try:
            spec = importlib.util.find_spec(parts[0])
        except (ImportError, ValueError):
            return False, None
    for part in parts[1:]:
        if spec is None:
            return False, None
        if not spec.submodule_search_locations:  # not a package: only its code can say (os.path)
            return True, None
        spec = PathFinder.find_spec(part, list(spec.submodule_search_locations))
    return spec is not None, spec.origin if spec is not None else None


def not_runnable(program: str, path: str, cwd: str) -> str | None:
    """Why a task could not exec `program` from `cwd` with `path` as its PATH, as execvp looks it
    up (a name with a slash is a path, else each PATH entry in turn); None when it can."""
    found = exec_path(program, path, cwd)
    if found is None:
        if "/" not in program:
            return f"not on PATH={path}"
        return "not an executable file" if os.path.exists(os.path.join(cwd, program)) else "no such file"
    head = read_head(found)
    if head is None:  # executable but unreadable: exec may still run a binary
        return None
    refused = exec_refusal(head)
    if refused is not None:
        return refused
    interpreter, *rest = shebang(head) or [""]
    named = [word for word in rest if not word.startswith("-")][:1]  # `#!/usr/bin/env python3`
    if os.path.basename(interpreter) == "env" and named and "=" not in named[0]:
        if exec_path(named[0], path, cwd) is None:
            return f"its #! line runs {named[0]!r} through env, and there is no {named[0]} on PATH there"
    return None


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
    import shutil

    path = shutil.which("nvidia-smi")
    answer: dict[str, Any] = {"path": path}
    if os.environ.get("SLURM_STEP_ID") is not None:
        answer["slurm_step_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    if path is None:
        return answer
    answer["query"] = _run_nvidia_smi(path, [GPU_QUERY, "--format=csv,noheader,nounits"])
    if answer["query"].get("code") == 0:
        answer["header"] = _run_nvidia_smi(path, [])
    return answer


def _accept_all(selector: Any, wake: int) -> None:
    """Take every connection off the backlogs of one `bind`'s listeners, so a mesh of any size never
    fills them: one thread for all of them (a host of 250 tasks had started 250), until `release`
    writes to `wake`."""
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj == wake:
                    return
                try:
                    key.fileobj.accept()[0].close()
                except OSError:  # the peer gave up meanwhile, or the listener is being closed
                    continue
    finally:
        selector.close()
        os.close(wake)


def _bind(ports: list[int]) -> dict[str, Any]:
    import selectors
    import threading

    results = {}
    listening = []
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
            listening.append(sock)
            results[str(port)] = "ok"
        except OSError as error:
            sock.close()
            results[str(port)] = error.strerror or str(error)
    if listening:
        selector = selectors.DefaultSelector()
        wake_r, wake_w = os.pipe()
        selector.register(wake_r, selectors.EVENT_READ)
        for sock in listening:
            selector.register(sock, selectors.EVENT_READ)
        _listeners.extend(listening)
        _wakes.append(wake_w)
        threading.Thread(target=_accept_all, args=(selector, wake_r), daemon=True, name="accept").start()
    return {"results": results}


def _connect(addresses: list[list[Any]], timeout: float) -> dict[str, Any]:
    """Every address at once, from one thread: a firewall that drops costs one timeout, not one per
    address, and a host of a 64-host fleet makes its 63 connections without 63 threads. At most
    _in_flight() sockets are open at a time (a host of a large mesh must not run out of descriptors).
    Each address is tried as `socket.create_connection` would: every address its name resolves to, in
    turn, one that cannot be used (an address family the host lacks) counting as a failed one."""
    import selectors
    import time

    deadline = time.monotonic() + timeout
    targets = [(str(host), int(port)) for host, port in addresses]
    resolved = _resolve({host for host, _ in targets})
    outcomes: dict[tuple[str, int], str] = {}
    pending: dict[tuple[str, int], list[Any]] = {}
    for host, port in targets:
        found = resolved[host]
        if isinstance(found, str):
            outcomes[(host, port)] = found
        else:
            pending[(host, port)] = [(family, (address[0], port, *address[2:])) for family, address in found]
    waiting = list(pending)  # not started yet
    in_flight = _in_flight()
    with selectors.DefaultSelector() as selector:

        def attempt(target: tuple[str, int], error: str) -> None:
            """Start connecting to the target's next address; with none left, its outcome is `error`."""
            while pending[target]:
                family, address = pending[target].pop(0)
                try:
                    sock = socket.socket(family, socket.SOCK_STREAM)
                except OSError as failure:  # no such family here (IPv6 off), no descriptor left
                    error = failure.strerror or type(failure).__name__
                    continue
                sock.setblocking(False)
                code = sock.connect_ex(address)
                if code in (0, errno.EINPROGRESS):
                    selector.register(sock, selectors.EVENT_WRITE, target)
                    return
                sock.close()
                error = os.strerror(code)
            outcomes[target] = error

        try:
            while waiting or selector.get_map():
                while waiting and len(selector.get_map()) < in_flight:
                    attempt(waiting.pop(0), "no address")
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in selector.select(left):
                    sock, target = key.fileobj, key.data
                    selector.unregister(sock)
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # type: ignore[union-attr]
                    sock.close()  # type: ignore[union-attr]
                    if code == 0:
                        outcomes[target] = "ok"
                    else:
                        attempt(target, os.strerror(code))
        finally:
            for key in list(selector.get_map().values()):  # no answer in time: dropped on the way
                key.fileobj.close()  # type: ignore[union-attr]
                outcomes.setdefault(key.data, "TimeoutError")
    for target in waiting:  # never started: the time ran out on the ones before it
        outcomes.setdefault(target, "TimeoutError")
    return {"results": {f"{host}:{port}": outcomes[(host, port)] for host, port in targets}}


def _in_flight() -> int:
    """How many sockets a mesh check holds open at once: up to 256, and a quarter of what this process
    may open (a host with a low descriptor limit checks its peers a few at a time, not refused)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 256 if soft == resource.RLIM_INFINITY else max(4, min(256, soft // 4))


def _resolve(hosts: set[str]) -> dict[str, list[tuple[int, Any]] | str]:
    """Each host's stream addresses (family, sockaddr), or why it has none. Names are looked up side by
    side (a slow resolver costs one wait); address literals need no lookup."""

    def lookup(host: str) -> list[tuple[int, Any]] | str:
        try:
            return [
                (family, address) for family, _, _, _, address in socket.getaddrinfo(host, 0, 0, socket.SOCK_STREAM)
            ]
        except OSError as error:
            return error.strerror or type(error).__name__

    names = [host for host in hosts if not _is_literal(host)]
    found: dict[str, list[tuple[int, Any]] | str] = {host: lookup(host) for host in hosts if _is_literal(host)}
    if names:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
            found.update(zip(names, pool.map(lookup, names), strict=True))
    return found


def _is_literal(host: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
            return True
        except OSError:
            continue
    return False


def handle(request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    path = request.get("path", "")
    if op == "info":
        return _info(request)
    if op == "write_marker":
        _make_dirs(os.path.dirname(path))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(request["token"])
        return {"ok": True}
    if op == "read_marker":
        try:
            with open(path, encoding="utf-8") as handle:
                return {"token": handle.read()}
        except OSError as error:
            return {"token": None, "error": error.strerror}
    if op == "remove":
        try:
            os.remove(path)
        except OSError:  # already gone, or never written
            pass
        while _created:
            try:
                os.rmdir(_created.pop())
            except OSError:  # something else was put there meanwhile: leave it
                break
        return {"ok": True}
    if op == "bind":
        return _bind([int(p) for p in request.get("ports", [])])
    if op == "connect":
        return _connect(request.get("addresses", []), float(request.get("timeout", 3)))
    if op == "release":
        while _wakes:  # each accepting thread leaves at its next look (a listener closed before: a failed accept)
            wake = _wakes.pop()
            os.write(wake, b"x")
            os.close(wake)
        while _listeners:
            listener = _listeners.pop()
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes its accepting thread
            except OSError:  # not connected: nothing to shut down
                pass
            listener.close()
        return {"ok": True}
    return {"error": f"unknown op {op!r}"}
