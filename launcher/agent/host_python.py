"""What the host's python has and runs: its site directories, TensorFlow and the worker runtime there,
and whether a task's program, script, `-m` module or `module:function` target is there (found,
never run or imported). Standard library only: part of the host agent (launcher/agent/probe.py asks).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Any

from launcher.agent.module_names import top_level_names
from launcher.agent.spawn import exec_path, exec_refusal, read_head, shebang

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
