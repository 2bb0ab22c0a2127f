"""Check every host before anything starts, in parallel, and report every problem at once.

Per host: reachable and authenticated (SSH), python and TensorFlow present with the same versions
everywhere, the worker runtime installed (when the spec uses it), on hosts given GPUs a working
nvidia-smi with the same driver and CUDA versions everywhere and every GPU id of the spec (see
launcher.preflight.gpus), the working directory and the checkpoint directory present, the checkpoint
directory really shared (a marker written on one host is read on all), each task's port free, the
script of a `python script.py` command and the modules of the spec's `module:function` targets
present (found, never run), and every host able to open a TCP connection to
the other hosts' task ports while they are bound (every other host's up to 16 hosts, a sample of
about log2(N) past that: launcher/preflight/mesh.py; two hosts the local transport runs under
loopback addresses are not checked against each other). Every host is asked at once and its answer
waited for after. Starts no task; leaves no file behind.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from launcher.agent.probe import RUNTIME_PACKAGES, creatable, package_digest
from launcher.agent.protocol import Answer, InfoRequest, ProbeRequest
from launcher.common.errors import HostError
from launcher.common.masking import redact, redacted
from launcher.plan import LaunchPlan, TaskLaunch, machines
from launcher.preflight.gpus import GpuHost, fleet_problems, inventory
from launcher.preflight.host_checks import Seen, host_problems, version_problems
from launcher.preflight.mesh import peers_to_check
from launcher.spec.addresses import machine_key
from launcher.spec.models import ClusterSpec
from launcher.spec.python_script import module_of, script_of
from launcher.transport.base import Agent, Transport
from launcher.transport.session import NoAnswer
from worker.contract import is_url
from worker.training_spec import BuiltinTraining, CommandTraining, FunctionTraining

log = logging.getLogger(__name__)
# What the spec's env may set that decides whether a python starts at all: checked by starting one with them.
STARTUP_VARIABLES = frozenset({"PYTHONHOME", "PYTHONPLATLIBDIR", "LD_PRELOAD", "LD_LIBRARY_PATH"})
T = TypeVar("T")
PROBE_TIMEOUT_S = 30.0  # for every host's answer to one round of probes, all asked at once


@dataclass
class _Host:
    index: int
    address: str
    is_local: bool
    python: str
    workdir: str
    tasks: list[TaskLaunch]
    gpus: list[int] | None = None  # the GPU ids the spec gives this host's tasks; None or []: not checked
    session: Agent | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class PreflightReport:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    hosts: list[dict[str, Any]] = field(default_factory=list)  # what each host reported (versions, GPUs)

    @property
    def ok(self) -> bool:
        return not self.problems


def _asked(
    hosts: list[_Host], request_of: Callable[[_Host], ProbeRequest], timeout: float = PROBE_TIMEOUT_S
) -> list[tuple[_Host, Answer | BaseException]]:
    """Every host's answer to its probe: all are sent first, so a fleet waits once for its slowest host."""
    asked: list[tuple[_Host, Callable[[float], Answer] | BaseException]] = []
    for host in hosts:
        assert host.session is not None
        try:
            asked.append((host, host.session.ask(request_of(host))))
        except Exception as error:  # noqa: BLE001 - reported per host, never raised across hosts
            asked.append((host, error))
    deadline = time.monotonic() + timeout
    results: list[tuple[_Host, Answer | BaseException]] = []
    for host, answer in asked:
        try:
            if isinstance(answer, BaseException):
                raise answer
            results.append((host, answer(max(0.0, deadline - time.monotonic()))))
        except NoAnswer as error:  # the round's time, not what was left of it for this host
            results.append((host, RuntimeError(f"no answer to {error.op} within {timeout:g}s")))
        except Exception as error:  # noqa: BLE001 - reported per host, never raised across hosts
            results.append((host, error))
    return results


def run_preflight(spec: ClusterSpec, plan: LaunchPlan, transport: Transport) -> PreflightReport:
    """Check every host (local ones too) and the run directory; writes nothing that outlives it.

    Probes run in the hosts' agents, the ones that will start the tasks."""
    report = PreflightReport()
    if not creatable(plan.run_dir):
        why = (
            "exists but is not writable"
            if os.path.isdir(plan.run_dir)
            else "cannot be created (a parent is a file or not writable)"
        )
        report.problems.append(
            f"run directory {plan.run_dir} {why}; set run_root or --run-root to a writable directory"
        )
    hosts: list[_Host] = []
    by_machine: dict[int, list[TaskLaunch]] = {}
    for task in plan.tasks:
        by_machine.setdefault(task.host_index, []).append(task)
    every = machines(spec)  # a plan of spares in seats runs on spare hosts
    for index, tasks in by_machine.items():
        entry = every[index]
        hosts.append(_Host(index, entry.address, entry.is_local, tasks[0].python, tasks[0].cwd, tasks, entry.gpu_ids))
    need_worker = isinstance(spec.training, (BuiltinTraining, FunctionTraining))
    targets = _targets(spec)

    transport.connect([host.index for host in hosts])

    reached = []
    for host in hosts:
        try:
            host.session = transport.agent(host.index)  # connected above: this session, or why there is none
        except HostError as error:
            report.problems.append(str(error))
            continue
        reached.append(host)
    for host, answer in _asked(reached, lambda h: _info_request(spec, plan, h, need_worker, targets)):
        if isinstance(answer, dict):
            host.info = answer
        else:
            report.problems.append(
                f"{host.address}: cannot run {host.python!r} there ({answer}); set python for this host"
            )
    live = [h for h in hosts if h.info]
    _check_info(live, plan, need_worker, report)
    _check_targets(live, targets, report)
    _check_gpus(live, report)
    _check_shared_checkpoints([h for h in live if h.info.get("checkpoint_ok")], plan, report)
    _check_ports_and_mesh(live, report)
    for host in live:
        info = host.info
        report.lines.append(
            f"{host.address}: python {info['python']}, tensorflow {info['tensorflow'] or _no_tensorflow(need_worker)}, "
            f"{len(host.tasks)} task(s) on port(s) {', '.join(str(t.port) for t in host.tasks)}"
        )
        report.hosts.append(_host_record(host))
    # what it says quotes the spec (a checkpoint URL's password, a path holding a secret's value)
    report.lines = [redact(line) for line in report.lines]
    report.problems = [redact(problem) for problem in report.problems]
    report.hosts = [redacted(record) for record in report.hosts]
    return report


def _info_request(
    spec: ClusterSpec, plan: LaunchPlan, host: _Host, need_worker: bool, targets: dict[str, str]
) -> InfoRequest:
    """What the host's agent is asked to report (launcher/agent/probe.py answers it)."""
    return {
        "op": "info",
        "workdir": host.workdir,
        "checkpoint_dir": plan.checkpoint_dir,
        "need_worker": need_worker,
        # the runtime's packages as this launcher has them: fit runs the runtime too
        "runtime_marks": {} if isinstance(spec.training, CommandTraining) else runtime_marks(),
        "gpus": bool(host.gpus),
        "programs": sorted({task.argv[0] for task in host.tasks}),
        "scripts": sorted({script for task in host.tasks if (script := script_of(task.command))}),
        "command_modules": sorted(
            {module for task in host.tasks if task.command[:1] == [task.python] and (module := module_of(task.command))}
            if isinstance(spec.training, CommandTraining)
            else ()
        ),  # a command's own, run by the python the agent runs (another's packages are not its to read);
        # the runtime's `-m worker` is need_worker's to check
        "modules": sorted({target.partition(":")[0] for target in targets.values()}),
        "functions": sorted(set(targets.values())),
        "pythonpath": host.tasks[0].env.get("PYTHONPATH"),
        "startup_env": _startup_env(host),
        "path": host.tasks[0].env.get("PATH"),  # the spec's, else the host's own
    }


@functools.cache
def runtime_marks() -> dict[str, str]:
    """probe.package_digest of the launcher's own copy of each runtime package."""
    import importlib.util

    marks = {}
    for name in RUNTIME_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            marks[name] = package_digest(next(iter(spec.submodule_search_locations)))
    return marks


def _host_record(host: _Host) -> dict[str, Any]:
    """What preflight.json keeps of a host: where it is, what it runs, what it has."""
    info = host.info
    record: dict[str, Any] = {
        "address": host.address,
        "hostname": info.get("hostname"),
        "python": info.get("python"),
        "executable": info.get("executable"),
        "tensorflow": info.get("tensorflow"),
        "tasks": [t.name for t in host.tasks],
        "ports": [t.port for t in host.tasks],
    }
    if "gpus" in info:
        found = inventory(info["gpus"])
        record["gpus"] = {
            "spec": host.gpus,
            "driver": found.driver,
            "cuda": found.cuda,
            "problem": found.problem,
            "devices": [asdict(gpu) for gpu in found.gpus],
        }
    return record


def _check_gpus(hosts: list[_Host], report: PreflightReport) -> None:
    checked = [
        GpuHost(h.address, f"hosts[{h.index}].gpus", tuple(h.gpus or ()), inventory(h.info.get("gpus")))
        for h in hosts
        if h.gpus
    ]
    report.problems.extend(fleet_problems(checked))
    for host in checked:
        if host.found.problem is None:
            report.lines.append(f"{host.address}: GPUs {', '.join(map(str, host.wanted))} of {host.found.describe()}")


def _no_tensorflow(need_worker: bool) -> str:
    """How a host without TensorFlow is listed: missing for the built-in runtime; a command may bring its own."""
    return "MISSING" if need_worker else "not installed for this python (the command must bring its own)"


def _check_info(hosts: list[_Host], plan: LaunchPlan, need_worker: bool, report: PreflightReport) -> None:
    """Each host's answers against the table of host checks, then the versions across hosts."""
    for host in hosts:
        seen = Seen(
            host.address,
            host.info,
            host.workdir,
            host.python,
            plan.checkpoint_dir,
            need_worker,
            shared=len(hosts) > 1,
            startup_env=tuple(sorted(_startup_env(host))),
        )
        report.problems.extend(host_problems(seen))
    report.problems.extend(version_problems([(host.address, host.info) for host in hosts]))


def _startup_env(host: _Host) -> dict[str, str]:
    """The spec's variables that decide whether the tasks' python starts, when the tasks run this host's
    python (the runtime, or a command's `python`): another program may want them as they are."""
    if any(task.argv[0] != host.python for task in host.tasks):
        return {}
    return {k: v for k, v in host.tasks[0].env.items() if k in STARTUP_VARIABLES}


def _targets(spec: ClusterSpec) -> dict[str, str]:
    """The `module:function` targets the worker runtime will import, by their spec field."""
    training = spec.training
    fields = ("target",) if isinstance(training, FunctionTraining) else ("model", "dataset")
    found = {name: getattr(training, name, None) for name in fields}
    return {f"training.{name}": value for name, value in found.items() if isinstance(value, str) and value}


def _check_targets(hosts: list[_Host], targets: dict[str, str], report: PreflightReport) -> None:
    for host in hosts:
        missing = set(host.info.get("modules_missing") or [])
        for field_name, target in targets.items():
            module = target.partition(":")[0]
            if module in missing:
                fix = (
                    f"a target names a module, not its file: {module.removesuffix('.py')}:{target.partition(':')[2]}"
                    if module.endswith(".py")
                    else "check its spelling, or put it there"
                )
                report.problems.append(
                    f"{host.address}: {field_name} {target!r}: no module {module!r} there, neither in the working "
                    f"directory {host.workdir} nor among {host.info['executable']}'s packages; {fix}"
                )
            elif target in (absent := host.info.get("functions_missing") or {}):
                function = target.partition(":")[2]
                close = " or ".join(repr(f"{module}:{name}") for name in absent[target])
                report.problems.append(
                    f"{host.address}: {field_name} {target!r}: module {module!r} has no top-level {function!r}; "
                    + (f"did you mean {close}?" if close else f"define {function!r} there, or name the function it has")
                )


def _check_shared_checkpoints(hosts: list[_Host], plan: LaunchPlan, report: PreflightReport) -> None:
    if is_url(plan.checkpoint_dir):
        report.lines.append(
            f"checkpoint_dir {plan.checkpoint_dir} is an object-store URL: TensorFlow reaches it from "
            "every worker; not checked here"
        )
        return
    if len({machine_key(h.address) for h in hosts}) < 2:
        return
    token = secrets.token_hex(8)
    path = f"{plan.checkpoint_dir.rstrip('/')}/.tflaunch-preflight-{token}"
    writer = hosts[0]
    assert writer.session is not None
    try:
        writer.session.probe({"op": "write_marker", "path": path, "token": token})
    except RuntimeError as error:  # a full disk, a read-only mount, the agent gone meanwhile
        report.problems.append(
            f"{writer.address}: cannot write in checkpoint_dir {plan.checkpoint_dir} ({error}); checkpoints are "
            "written there: free space, or choose another checkpoint_dir"
        )
        return
    try:
        for host, outcome in _asked(hosts[1:], lambda h: {"op": "read_marker", "path": path}):
            seen = outcome.get("token") if isinstance(outcome, dict) else None
            if seen != token:
                report.problems.append(
                    f"{host.address}: checkpoint_dir {plan.checkpoint_dir} is not shared with {writer.address} "
                    f"(a marker written there is not visible here); workers must see each other's checkpoints"
                )
    finally:
        try:
            writer.session.probe({"op": "remove", "path": path})
        except RuntimeError as error:  # the marker is left: say where, it is the launcher's own
            log.warning("%s: cannot remove the preflight's marker %s: %s", writer.address, path, error)


def _apart(host: _Host, other: _Host) -> bool:
    """Whether `host` must prove it reaches `other`'s ports. Not between two hosts that the local
    transport runs on this machine under loopback addresses (127.x.y.z, ::1, or the name localhost): one kernel,
    where such a connection always succeeds, so checking it proves nothing and costs a connection
    per task (thousands for a simulated fleet). Any other address of a local host is what its
    peers will dial, so it is checked like a remote one."""
    return other is not host and not (_loopback_local(host) and _loopback_local(other))


def _loopback_local(host: _Host) -> bool:
    if not host.is_local:
        return False
    name = host.address.lower().rstrip(".")
    if name == "localhost":  # a name under .localhost is dialled through the resolver: checked
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def _port_fix(hosts: list[_Host], host: _Host, port: int) -> str:
    """How to free a port; hosts that share one machine (loopback aliases over SSH, a simulated fleet) also
    share its ports, and each one's bind takes the port from the others."""
    same = [other.address for other in hosts if other is not host and any(t.port == port for t in other.tasks)]
    if not same:
        return "free it or choose another port"
    return (
        f"free it or choose another port; {', '.join(same[:3])} uses port {port} too: hosts that are one machine "
        "need ports of their own"
    )


def _check_ports_and_mesh(hosts: list[_Host], report: PreflightReport) -> None:
    bound = _asked(hosts, lambda h: {"op": "bind", "ports": [t.port for t in h.tasks]})
    try:
        for host, outcome in bound:
            results = outcome.get("results", {}) if isinstance(outcome, dict) else {}
            for task in host.tasks:
                status = results.get(str(task.port)) or str(outcome)
                if status != "ok":
                    report.problems.append(
                        f"{host.address}: port {task.port} for {task.name} is not free ({status}); "
                        + _port_fix(hosts, host, task.port)
                    )

        def reach(position: int, host: _Host) -> list[list[Any]]:
            others = [hosts[i] for i in peers_to_check(len(hosts), position)]
            return [[t.host, t.port] for other in others if _apart(host, other) for t in other.tasks]

        checks = {id(host): reach(position, host) for position, host in enumerate(hosts)}
        reaching = [host for host in hosts if checks[id(host)]]
        for host, outcome in _asked(reaching, lambda h: {"op": "connect", "addresses": checks[id(h)], "timeout": 3}):
            results = outcome.get("results", {}) if isinstance(outcome, dict) else {"*": str(outcome)}
            for address, status in results.items():
                if status != "ok":
                    report.problems.append(
                        f"{host.address}: cannot open a TCP connection to task address {address} ({status}); "
                        "check firewalls and that the address resolves from this host"
                    )
    finally:
        _asked(hosts, lambda h: {"op": "release"})
