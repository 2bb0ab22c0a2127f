"""What a person asked for (a spec file, `--local N` or a host list, plus overrides) turned into a
validated ClusterSpec.

Shared by the command line and the Python API (`tflaunch.launch`). Reads files; never starts
anything. A host list is the quick form of a spec's `hosts` for a run without a spec file:
`-H a:2,b:2` or a hostfile with one `HOST[:N]` or `HOST slots=N` per line (`#` comments).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from launcher.common.errors import LaunchError, SpecError, SpecProblem, UsageError
from launcher.common.masking import redact, secret_arguments, set_secrets, without_password
from launcher.common.secret_names import MIN_MASKED, is_secret
from launcher.rundir.refusals import RUN_ROOT_IN_A_RUN, refuse_run_root
from launcher.spec.addresses import is_loopback, is_this_machine
from launcher.spec.limits import MAX_HOSTS, MAX_WORKERS_PER_HOST
from launcher.spec.masked import redactor_of
from launcher.spec.python_script import is_python, module_of, script_of, split_python_command
from launcher.spec.sources import STDIN_FLAG, STDIN_NAME

if TYPE_CHECKING:  # pydantic: imported by the paths that validate
    from launcher.spec.load import HostsFrom
    from launcher.spec.models import ClusterSpec

__all__ = ["LaunchRequest", "parse_host_list", "read_hostfile", "request_spec"]

_MAX_HOSTFILE_BYTES = 4 * 2**20  # 4,096 lines of a long name and a count fit many times over
HOST_LIST_PORT = 23456  # -H/--hostfile: TF ports of a remote host's tasks, upward from here (preflight checks them)
_HOST_ENTRY = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:,\[\]]+)(?::(?P<n>\d+))?$")
_HOSTFILE_LINE = re.compile(
    r"^(?P<host>\[[0-9A-Fa-f:.]+\]"  # [IPv6], with :N or slots=N
    r"|[0-9A-Fa-f]*:[0-9A-Fa-f:.]*:[0-9A-Fa-f.]*(?=\s|$)"  # a bare IPv6 address (two colons or more): slots=N only
    r"|[^\s:\[\]]+)"
    r"(?::(?P<n>\d+))?(?:\s+slots\s*=\s*(?P<slots>\d+))?$"
)


@dataclass(frozen=True)
class LaunchRequest:
    """One of `cluster` (a spec file or an already-decoded spec), `local` or `hosts`, plus overrides."""

    cluster: str | Path | Mapping[str, Any] | None = None
    local: int | None = None
    hosts: tuple[tuple[str, int], ...] = ()
    name: str | None = None
    run_root: str | None = None
    command: tuple[str, ...] = ()
    local_network: str | None = None  # --host-network: "host"
    source: str = field(default="")

    @property
    def described(self) -> str:
        """How the spec was given, for error messages."""
        if self.source:
            return self.source
        if isinstance(self.cluster, (str, Path)):
            return STDIN_NAME if self.cluster == STDIN_FLAG else str(self.cluster)
        if self.cluster is not None:
            return "the spec given"
        return "--local" if self.local is not None else "-H/--hostfile"


def _bare_ipv6(text: str) -> bool:
    import ipaddress

    try:
        return text.count(":") >= 2 and isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


def parse_host_list(text: str, flag: str = "-H") -> tuple[tuple[str, int], ...]:
    """`a:2,b:2,c` -> (("a", 2), ("b", 2), ("c", 1)); a clear error naming the bad entry."""
    if "@" in text and "," in text:  # which comma parts hosts and which a password is not ours to guess: quote none
        raise UsageError(
            f"{flag} holds a user@host: a host list takes no user; give the hosts alone and the user in a spec's "
            "ssh.user (logins use keys, never a password)."
        )
    parts = text.split(",")
    _at_most_max_hosts(len(parts), flag)
    entries = []
    for part in parts:
        if _bare_ipv6(part.strip()):  # `::1`: an address with no count (with one, it goes in brackets)
            entries.append((part.strip(), 1))
            continue
        if "@" in part:
            login, _, host = part.strip().rpartition("@")
            raise UsageError(
                f"Got {without_password(part.strip())[:200]!r} in {flag}: a host list takes no user; give the host "
                f"alone ({host[:200]!r}) and the user in a spec's ssh.user"
                + (" (logins use keys, never a password)." if ":" in login else ".")
            )
        match = _HOST_ENTRY.match(part.strip())
        if match is None or (match["n"] is not None and not 1 <= int(match["n"]) <= MAX_WORKERS_PER_HOST):
            v6 = " (an IPv6 address goes in brackets: [::1]:2)" if part.count(":") >= 2 and "[" not in part else ""
            raise UsageError(
                f"Got {part.strip()[:200]!r} in {flag}: give HOST or HOST:N (N from 1 to {MAX_WORKERS_PER_HOST} "
                f"workers), comma-separated, e.g. -H node1:2,node2:2{v6}."
            )
        entries.append((match["host"].strip("[]"), int(match["n"] or 1)))
    return _no_repeats(tuple(entries), flag)


def _at_most_max_hosts(count: int, where: str) -> None:
    if count > MAX_HOSTS:
        raise UsageError(f"{where} lists more than {MAX_HOSTS} hosts: a launch takes at most {MAX_HOSTS}.")


def read_hostfile(path: str) -> tuple[tuple[str, int], ...]:
    """A hostfile: one `HOST`, `HOST:N` or `HOST slots=N` per line; blank lines and `#` comments skipped."""
    try:
        with open(path, "rb") as handle:  # bounded: /dev/zero or a huge file is refused, not read for ever
            data = handle.read(_MAX_HOSTFILE_BYTES + 1)
        if len(data) > _MAX_HOSTFILE_BYTES:
            raise UsageError(f"--hostfile {path} is larger than {_MAX_HOSTFILE_BYTES // 2**20} MiB; is it a hostfile?")
        text = data.decode("utf-8-sig")  # a byte-order mark is not part of the first host
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"Cannot read --hostfile {path}: {getattr(error, 'strerror', None) or error}.") from None
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _HOSTFILE_LINE.match(line)
        count = match and (match["slots"] or match["n"])
        if match is None or (match["slots"] and match["n"]) or (count and not 1 <= int(count) <= MAX_WORKERS_PER_HOST):
            raise UsageError(
                f"{path}:{number}: got {without_password(line)[:200]!r}; write one HOST, HOST:N or HOST slots=N per "
                f"line (N from 1 to {MAX_WORKERS_PER_HOST}; an IPv6 address as [::1]:N, or ::1 slots=N)."
            )
        entries.append((match["host"].strip("[]"), int(count or 1)))
        _at_most_max_hosts(len(entries), path)
    if not entries:
        raise UsageError(f"{path}: lists no hosts; write one HOST, HOST:N or HOST slots=N per line.")
    return _no_repeats(tuple(entries), path)


def _no_repeats(entries: tuple[tuple[str, int], ...], where: str) -> tuple[tuple[str, int], ...]:
    """Each host once, whatever the case of its name (`H1` and `h1`); linear in the entries."""
    names: dict[str, list[str]] = {}
    for host, _ in entries:
        names.setdefault(host.lower().rstrip("."), []).append(host)
    repeated = sorted(" and ".join(dict.fromkeys(spelt)) for spelt in names.values() if len(spelt) > 1)
    if repeated:
        raise UsageError(f"{where} names {', '.join(repeated)} more than once: give each host once with its count.")
    return entries


def _quiet_tensorflow() -> dict[str, Any]:
    """TensorFlow's C++ INFO lines (about a dozen per task at start-up) off, as cluster.example.json
    has them, unless this environment sets TF_CPP_MIN_LOG_LEVEL itself: then every task gets that
    value (a remote host's tasks would not inherit it)."""
    return {"env": {"TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1")}}


def named_after(command: tuple[str, ...], default: str) -> str:
    """The run a command given without a spec file is by default, so that each script has its own run
    directory and checkpoints: its script's stem (`python train.py` -> `train`), its module (`python -m
    pkg.train` -> `pkg.train`), else its program's name (`./train.sh` -> `train`); `default` for the built-in
    training, or a name that leaves nothing usable."""
    if not command:
        return default
    argv = list(command)
    found = script_of(argv) or module_of(argv) or (None if is_python(argv[0]) else argv[0])
    if not found:
        return default
    stem = PurePath(found).name
    stem = stem.rsplit(".", 1)[0] if stem.endswith((".py", ".sh")) else stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).lstrip("._-")[:64]
    return name or default


def _base_data(request: LaunchRequest) -> dict[str, Any] | None:
    """The spec of a run without a spec file; None when a spec file (or object) is given."""
    if request.local is not None:
        if not 1 <= request.local <= MAX_WORKERS_PER_HOST:
            raise UsageError(f"Got --local {request.local}: give between 1 and {MAX_WORKERS_PER_HOST} workers.")
        return {
            "name": request.name or named_after(request.command, "local"),
            "hosts": [{"address": "localhost", "workers": request.local}],
            **_quiet_tensorflow(),
        }
    if request.hosts:
        hosts: list[dict[str, Any]] = []
        for host, count in request.hosts:
            entry: dict[str, Any] = {"address": host, "workers": count}
            if not is_this_machine(host):  # free ports are picked on this machine only
                entry["ports"] = list(range(HOST_LIST_PORT, HOST_LIST_PORT + count))
            hosts.append(entry)
        return {"name": request.name or named_after(request.command, "hosts"), "hosts": hosts, **_quiet_tensorflow()}
    return None


# The spec's fields the command line sets, as a message names them (not by a spec path no one wrote)
_FLAGS = {
    "local_network": "--host-network",
    "run_root": "--run-root",
    "name": "--name",
    "training": "the command after --",
}
_NEWLINE_HINT = "contains a newline: put the code in a script file (python3 train.py)"


def _by_flag(error: SpecError, updates: dict[str, Any]) -> LaunchError:
    """`error` as a UsageError naming the flags it is about, when every problem in it is a value the
    command line gave; else `error` itself (the spec's own problems are named by their path)."""
    said = []
    for problem in error.problems:
        field = re.match(r"\$\.(\w+)", problem.path)
        if field is None or field[1] not in updates or field[1] not in _FLAGS:
            return error
        where = _FLAGS[field[1]]
        word = re.fullmatch(r"\$\.training\.argv\[(\d+)\]", problem.path)
        if word is not None:
            where += f", word {int(word[1]) + 1}"
        message = (
            _NEWLINE_HINT if word is not None and problem.message.startswith("contains a newline") else problem.message
        )
        said.append(f"{where}: {message.rstrip('.')}")
    text = "; ".join(said)
    return UsageError(f"{text[:1].upper()}{text[1:]}. Nothing was started.")


def request_spec(
    request: LaunchRequest, hosts_from: HostsFrom | None = None, notes: list[str] | None = None
) -> ClusterSpec:
    """Validate what was asked for; raises SpecError or UsageError (exit 2), starts nothing. What the
    command line changed of the spec's own settings without a word is added to `notes`."""
    from launcher.spec.load import load_spec, parse_spec  # pydantic (~70 ms): only a request that validates
    from worker.training_spec import CommandTraining  # pydantic, likewise

    for flag, value in (("name", request.name), ("run-root", request.run_root)):
        if value is not None and not value.strip():
            raise UsageError(f"Got an empty --{flag}: give a value or leave the flag out.")
    data = _base_data(request)
    from_file = data is None
    if data is not None:
        try:
            spec = parse_spec(data, request.described)
        except SpecError as error:
            raise _by_flag(error, {"name": request.name} if request.name is not None else {}) from None
    elif isinstance(request.cluster, (str, Path)):
        if not str(request.cluster).strip():
            raise UsageError("Got an empty --cluster: give a value or leave the flag out.")
        spec = load_spec(None if request.cluster == STDIN_FLAG else Path(request.cluster), hosts_from)
    elif request.cluster is not None:
        spec = parse_spec(dict(request.cluster), request.described, hosts_from)
    else:
        raise UsageError("Give --cluster FILE, --local N, -H HOST:N,... or --hostfile FILE (see 'launch --help').")
    updates: dict[str, Any] = {}
    if request.command:
        updates["training"] = {"kind": "command", "argv": list(request.command)}
        if notes is not None and "training" in spec.model_fields_set:
            given = spec.training
            # never the spec's own argv: it may hold secrets, and those known from here on are the new command's
            was = "its own command" if isinstance(given, CommandTraining) else f"kind {given.kind!r}"
            if not isinstance(given, CommandTraining) or list(given.argv) != list(request.command):
                notes.append(f"the command after -- replaces the spec's training ({was})")
    if request.name is not None and from_file:
        updates["name"] = request.name
    if request.run_root is not None:
        updates["run_root"] = request.run_root
    if request.local_network is not None:
        updates["local_network"] = request.local_network
    if updates:  # re-validate: overrides obey the same rules as the file
        merged = {**spec.model_dump(mode="json", exclude_unset=True), **updates}
        try:
            spec = parse_spec(merged, request.described, hosts_from)
        except SpecError as error:
            raise _by_flag(error, updates) from None
    set_secrets(redactor_of(spec))
    refuse_run_root(spec, (RUN_ROOT_IN_A_RUN,))
    try:
        _refuse_visible_secrets(spec, request.described)
    except SpecError as error:  # a secret in the command after --: named so
        raise _by_flag(error, updates) from None
    if notes is not None:
        notes.extend(_secrets_too_short(spec))
    return spec


_SETTINGS = frozenset(("0", "1", "y", "n", "t", "f", "yes", "no", "on", "off"))  # USE_TOKEN=1 is a setting


def _secrets_too_short(spec: ClusterSpec) -> list[str]:
    """A secret's value shorter than MIN_MASKED is never masked (it would mask ordinary text): say so,
    where the spec's own env holds one (--dry-run shows it masked, by its name)."""

    envs = [("env", spec.env), *((f"hosts[{i}].env", host.env) for i, host in enumerate(spec.hosts))]
    envs += [(f"spare_hosts[{i}].env", host.env) for i, host in enumerate(spec.spare_hosts)]
    short = sorted(
        {
            f"{where}.{name}"
            for where, env in envs
            for name, value in env.items()
            if 0 < len(value) < MIN_MASKED and value.lower() not in _SETTINGS and is_secret(name, spec.secrets)
        }
    )
    argv = getattr(spec.training, "argv", None) or []
    too_short = [value for value in secret_arguments(argv[1:], spec.secrets) if len(value) < MIN_MASKED]
    short += [
        f"training.argv[{index}]" for index, arg in enumerate(argv) if index and any(map(arg.endswith, too_short))
    ]
    if not short:
        return []
    return [
        f"{', '.join(short)}: a secret's value shorter than {MIN_MASKED} characters is not masked in the tasks' "
        "output and logs (it would mask ordinary text); use a longer one"
    ]


def _refuse_visible_secrets(spec: ClusterSpec, source: str) -> None:
    """A secret in a command's arguments can be kept off the process's command line (world-readable
    in /proc) only when the command is a python: its arguments then travel in its environment. A
    Slurm job's options are shown to every user (squeue, scontrol): none may hold one. A secret is a
    flag of a secret name, a value of the spec's secrets, or a secret's form (`redact` finds the last two)."""

    def holding(args: list[str], first: int) -> list[int]:
        hidden = set(secret_arguments(args[first:], spec.secrets))
        return [
            index
            for index, arg in enumerate(args)
            if index >= first and (arg in hidden or any(value in arg for value in hidden) or redact(arg) != arg)
        ]

    problems: list[SpecProblem] = []
    argv = getattr(spec.training, "argv", None) or []
    python = bool(argv) and os.path.basename(argv[0]).startswith("python")
    code = python and split_python_command(argv)[1][:1] == ["-c"]  # `python3 -u -c CODE` too
    if argv and (not python or code):
        why = (
            "holds a secret, and a `python -c` command's arguments cannot be kept off the process list (a script's "
            "can: python script.py --token=...)"
            if code
            else "holds a secret, and only a python command's arguments can be kept off the process list"
        )
        problems += [
            SpecProblem(
                f"$.training.argv[{index}]", f"{why}: pass it in env (its value is masked everywhere) and read it there"
            )
            for index in holding(argv, 1)
        ]
    if spec.slurm is not None:
        for name, options in (("sbatch_options", spec.slurm.sbatch_options), ("srun_options", spec.slurm.srun_options)):
            problems += [
                SpecProblem(
                    f"$.slurm.{name}[{index}]",
                    "holds a secret, and a Slurm job's options are shown to every user (squeue, scontrol): pass it "
                    "in env (it reaches the tasks over the agents' channel) and read it there",
                )
                for index in holding(options, 0)
            ]
    if problems:
        raise SpecError(source, problems)


def task_names(spec: ClusterSpec) -> set[str]:
    from launcher.plan import task_slots  # pydantic, likewise: only a --show or --inject names tasks

    return {slot.name for slot in task_slots(spec)}


def shown_tasks(spec: ClusterSpec, text: str | None, flag: str = "--show") -> frozenset[str]:
    """The tasks `--show worker:0,worker:1` names; every name must be one of the spec's tasks."""
    if text is None:
        return frozenset()
    from launcher.rundir.logs import as_given, task_order  # the log reader (~10 ms): only for a --show

    wanted = frozenset(part.strip() for part in text.split(",") if part.strip())
    if not wanted:  # `--show "$T"`, T unset: no task, not all
        raise UsageError(
            f"Got an empty {flag}: give a task as type:index, e.g. {flag} worker:1, or leave the flag out."
        )
    unknown = sorted(wanted - (names := task_names(spec)))
    if unknown:
        raise UsageError(
            f"Got {flag} {as_given(text)}: no task {', '.join(map(as_given, unknown))} "
            f"(tasks: {', '.join(sorted(names, key=task_order))})."
        )
    return wanted


_THIS_MACHINE = ("localhost", "127.0.0.1", "::1")


def private_network_here(cluster: str | None, local: int | None, hosts: str | None) -> bool:
    """A cheap guess, before the spec is validated, that this launch runs every task on this machine in
    a private network (launcher/transport/local_network.py), which is then made ahead; a wrong guess
    costs a network the launch closes unused."""
    if local is not None:
        return True
    if hosts is not None:
        try:
            return all(is_loopback(host) for host, _ in parse_host_list(hosts))
        except UsageError:  # the real reading says why
            return False
    data = _spec_data(cluster)
    if data is None or data.get("local_network", "private") != "private" or not data["hosts"]:
        return False
    return all(
        isinstance(h, dict)
        and isinstance(h.get("address"), str)
        and is_loopback(h["address"])
        and (h.get("transport") == "local" or is_this_machine(h["address"]))
        for h in data["hosts"]
    )


def _spec_data(cluster: str | None) -> dict[str, Any] | None:
    """The spec file as plain JSON, when it is one with a list of hosts (None: the real reading reports it).
    Read once for both early guesses (the same file, unchanged since: its size and time say so)."""
    if not cluster or cluster == STDIN_FLAG or not os.path.isfile(cluster):  # a pipe is the real reading's alone
        return None
    try:
        found = os.stat(cluster)
    except OSError:
        return None
    return _read_spec_data(cluster, found.st_mtime_ns, found.st_size)


@functools.lru_cache(maxsize=1)
def _read_spec_data(cluster: str, mtime_ns: int, size: int) -> dict[str, Any] | None:
    try:
        data = json.loads(Path(cluster).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("hosts"), list) else None


def local_hosts_here(cluster: str | None, local: int | None, hosts: str | None) -> int:
    """A cheap guess, before the spec is validated, of how many hosts of this launch are this machine
    and run the launcher's own python (wrong guesses only cost agents that are closed unused)."""
    if local is not None:
        return 1
    if hosts is not None:
        try:
            return sum(host in _THIS_MACHINE for host, _ in parse_host_list(hosts))
        except UsageError:  # the real reading says why
            return 0
    data = _spec_data(cluster)
    if data is None or data.get("python"):
        return 0
    return sum(
        isinstance(h, dict)
        and not h.get("python")
        and (h.get("transport") == "local" or h.get("address") in _THIS_MACHINE)
        for h in data["hosts"]
    )
