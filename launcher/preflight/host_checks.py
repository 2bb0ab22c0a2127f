"""What a host's answers to the preflight's probe must show, as a table: one row per check.

A row names the check, finds what is wrong in one host's answers (one set of fields per problem,
none when it passes) and words each problem from a template. `host_problems` walks the table; a new
check of a host is a new row. Pure: the answers come in as data (launcher/agent/probe.py makes them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WORKER_PYTHON = (3, 11)  # the runtime starts as `python -P -m worker` (-P: 3.11+)
Fields = dict[str, Any]


@dataclass(frozen=True)
class Seen:
    """One host's answers, and what the launch needs of that host."""

    address: str
    info: dict[str, Any]
    workdir: str  # the tasks' working directory there
    python: str  # the python the spec runs there
    checkpoint_dir: str
    need_worker: bool  # the built-in runtime runs there (not a command of the user's)
    shared: bool  # more than one host: the checkpoint directory must be shared storage
    startup_env: tuple[str, ...] = ()  # the spec's variables that decide whether that python starts

    @property
    def where(self) -> str:
        """The working directory as the spec gives it, and where that is on the host when it says more."""
        path = self.info.get("workdir_path")
        return self.workdir if not path or path == self.workdir else f"{self.workdir} ({path})"

    def fields(self) -> Fields:
        return {
            "address": self.address,
            "executable": self.info.get("executable"),
            "workdir": self.where,
            "python": self.python,
            "checkpoint_dir": self.checkpoint_dir,
        }


@dataclass(frozen=True)
class Check:
    """One check: `finds` returns the fields of each problem it finds (none: it passes); `says` is the
    template of each problem's message, filled from the host's fields and the problem's own."""

    name: str
    finds: Callable[[Seen], list[Fields]]
    says: str


def _if(condition: object, **fields: Any) -> list[Fields]:
    return [fields] if condition else []


def _older_than(version: object, least: tuple[int, int]) -> bool:
    try:
        return tuple(int(part) for part in str(version).split(".")[:2]) < least
    except ValueError:  # a version we cannot read: let the start say what is wrong
        return False


def _workdir(seen: Seen) -> list[Fields]:
    if seen.info["workdir_ok"]:
        return []
    what = "is not a directory" if seen.info.get("workdir_exists") else "does not exist"
    return [{"shown": seen.where, "what": what}]


def _program_fix(seen: Seen, program: str, why: str) -> str:
    if program.endswith(".py"):
        return f"a Python script is run by a python: -- {seen.python} {program} ..."
    if "#!" in why:  # it is there, and exec would refuse it
        first = "add one" if "no #! line" in why else "fix it"
        return f"{first}, or run it with its interpreter (-- sh {program} ...)"
    if "/" in program:
        return f"a relative path starts from the working directory {seen.where}"
    return "give its full path, install it there, or set PATH in the spec's env"


def _programs(seen: Seen) -> list[Fields]:
    missing = seen.info.get("programs_missing") or {}
    return [{"program": p, "why": why, "fix": _program_fix(seen, p, why)} for p, why in missing.items()]


def _module_hint(module: str) -> str:
    if ":" in module:
        return (
            "-m takes a module, not a module:function; to run a function give training "
            '{"kind": "function", "target": "' + module + '"}'
        )
    if module.endswith(".py"):
        return f"-m takes a module's name, not its file's: -m {module.removesuffix('.py')}"
    return "check its spelling, or put it there (python -m looks in the working directory first)"


def _listed(key: str, **fields: Callable[[Any], Any]) -> Callable[[Seen], list[Fields]]:
    """Each entry of the answers' list (or dict: its key and value) under `key`, as `item` (and `why`)."""

    def finds(seen: Seen) -> list[Fields]:
        found = seen.info.get(key) or []
        pairs = found.items() if isinstance(found, dict) else ((item, None) for item in found)
        return [{"item": item, "why": why, **{k: f(item) for k, f in fields.items()}} for item, why in pairs]

    return finds


CHECKS: tuple[Check, ...] = (
    Check(
        "tensorflow-installed",
        lambda s: _if(not s.info["tensorflow"] and s.need_worker),  # a command may run another python, with its own
        "{address}: tensorflow is not installed for {executable}; install it there with this project's TensorFlow "
        "extra (pip install '.[tf]' in a clone of it, or pip install 'tensorflow==2.21.*')",
    ),
    Check(
        "runtime-python-version",
        lambda s: _if(
            s.need_worker and _older_than(s.info.get("python"), WORKER_PYTHON),
            least=".".join(map(str, WORKER_PYTHON)),
            version=s.info.get("python"),
        ),
        "{address}: the built-in worker runtime needs python {least} or newer; {executable} is {version}: set "
        "python for this host",
    ),
    Check(
        "runtime-not-shadowed",
        _listed("runtime_shadowed"),
        "{address}: {why} would be imported as the built-in runtime's own package {item!r}, and it is not this "
        "launcher's copy of it (PYTHONPATH names its directory, and comes before the installed packages; an empty "
        "entry, as `PYTHONPATH=$PYTHONPATH:/x` leaves, names the working directory): rename it, or take its "
        "directory out of PYTHONPATH",
    ),
    Check(
        "worker-importable",
        lambda s: _if(s.need_worker and not s.info.get("worker_ok")),
        "{address}: the worker runtime (package 'worker') is not importable by {executable}; install this project "
        "there (pip install .)",
    ),
    Check(
        "workdir-exists",
        _workdir,
        "{address}: working directory {shown} {what}; create it there, or set workdir to a directory that exists",
    ),
    Check(
        "programs-runnable",
        _programs,
        "{address}: the tasks' command {program!r} cannot run there ({why}); {fix}",
    ),
    Check(
        "python-starts-with-env",
        lambda s: _if(
            s.info.get("startup_env_fails"), why=s.info.get("startup_env_fails"), names=", ".join(s.startup_env)
        ),
        "{address}: {executable} does not start with the spec's env ({names}): {why}; fix or remove them",
    ),
    Check(
        "command-modules-found",
        _listed("command_modules_missing", hint=_module_hint),
        "{address}: the tasks' command runs python -m {item}, and there is no module {item!r} there, neither in the "
        "working directory {workdir} nor among {executable}'s packages; {hint}",
    ),
    Check(
        "command-packages-runnable",
        _listed("command_packages_without_main", path=lambda module: module.replace(".", "/")),
        "{address}: the tasks' command runs python -m {item}, and {item!r} is a package without a __main__.py, "
        "which python cannot run; give the module in it to run (-m {item}.MODULE) or add {path}/__main__.py",
    ),
    Check(
        "scripts-runnable",
        _listed("scripts_unrunnable"),
        "{address}: the tasks' script {item!r} cannot run there ({why}: python would exit at once); a relative "
        "path starts from the working directory {workdir}",
    ),
    Check(
        "checkpoints-safe",
        lambda s: _if(s.info.get("checkpoint_unsafe"), why=s.info.get("checkpoint_unsafe")),
        "{address}: checkpoint_dir {checkpoint_dir} {why}: a checkpoint planted there would be restored; use a "
        "directory of your own (chmod o-w, or another checkpoint_dir)",
    ),
    Check(
        "checkpoints-not-dangling",
        lambda s: _if(
            not s.info["checkpoint_ok"] and s.info.get("checkpoint_dangling"), link=s.info.get("checkpoint_dangling")
        ),
        "{address}: checkpoint_dir {checkpoint_dir} cannot be created there: {link} is a symbolic link to nothing; "
        "create what it points to, or set checkpoint_dir elsewhere",
    ),
    Check(
        "checkpoints-writable",
        lambda s: _if(
            not s.info["checkpoint_ok"] and not s.info.get("checkpoint_dangling"),
            shared="; it must be storage every host shares" if s.shared else "",
        ),
        "{address}: checkpoint_dir {checkpoint_dir} is not a writable directory and cannot be created there{shared}",
    ),
)


def host_problems(seen: Seen, checks: tuple[Check, ...] = CHECKS) -> list[str]:
    """Every problem the table finds in one host's answers, in the table's order."""
    base = seen.fields()
    return [check.says.format(**base, **found) for check in checks for found in check.finds(seen)]


def version_problems(versions_by_host: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Python (major.minor) and TensorFlow must be the same on every host."""
    problems = []
    for key in ("tensorflow", "python"):
        versions: dict[str, list[str]] = {}
        for address, info in versions_by_host:
            value = info.get(key)
            if value:
                version = value if key == "tensorflow" else ".".join(value.split(".")[:2])
                versions.setdefault(version, []).append(address)
        if len(versions) > 1:
            spread = "; ".join(f"{v} on {', '.join(a)}" for v, a in sorted(versions.items()))
            problems.append(f"{key} versions differ across hosts ({spread}); install the same version everywhere")
    return problems
