"""One launch from a validated spec to its result: plan, preflight, supervise, summarise.

Callable from the CLI, from tests and from other front ends (a scheduler's allocation). Never
prints: what a person sees goes through the Console callbacks the caller hands in. Signals to
the launcher become an exception on the main thread; shutdown and the summary run in `finally`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from launcher.common.errors import InterruptedLaunchError, PreflightError, RunDirError
from launcher.common.private_files import make_private_dir
from launcher.console import Console
from launcher.plan import LaunchPlan, PlanInputs, TaskLaunch, build_plan, host_python, machines
from launcher.preflight.check import run_preflight
from launcher.preflight.ports import check_local_ports, choose_free_ports, port_is_free
from launcher.preflight.spares import check_seat, check_spares, spare_plan
from launcher.rundir.bundle import write_launch_record
from launcher.rundir.checkpoint_mark import mark_checkpoints
from launcher.rundir.lock import RunLock, lock_run
from launcher.rundir.place import RunPlace, place_of
from launcher.rundir.refusals import OWNED, refuse_run_dir
from launcher.rundir.report import write_summary
from launcher.rundir.stacks_now import StackRequests
from launcher.rundir.stop import stop_requester
from launcher.spec.models import ClusterSpec
from launcher.supervise.faults import Fault
from launcher.supervise.gang import LaunchState, RunResult, TaskStatus
from launcher.supervise.grow_back import GrowBack
from launcher.supervise.membership import Membership, membership_of
from launcher.supervise.policy import RestartPolicy
from launcher.supervise.regroup import HostLoss
from launcher.supervise.supervisor import Supervisor
from launcher.transport.base import Transport
from launcher.transport.fleet import AgentTransport
from launcher.transport.hosts import agent_hosts, host_transport
from launcher.transport.local_network import NetworkStarting
from launcher.transport.slurm import SlurmMedium
from worker.contract import RunLayout, is_url
from worker.training_spec import BuiltinTraining, FunctionTraining

if TYPE_CHECKING:
    from launcher.preflight.check import PreflightReport
    from launcher.slurm.allocation import Allocation

log = logging.getLogger(__name__)
Planner = Callable[[int], LaunchPlan]


def next_attempt(run_dir: Path) -> int:
    """Attempts of earlier launches of the same run keep their logs: number after them."""
    if not run_dir.is_dir():
        return 0
    numbers = [n for p in run_dir.iterdir() if (n := RunLayout.attempt_of(p.name)) is not None]
    return max(numbers, default=-1) + 1


def make_planner(
    spec: ClusterSpec,
    place: RunPlace,
    faults: list[Fault] | None = None,
    ports: dict[str, int] | None = None,
    membership: Membership | None = None,
) -> Planner:
    """Plans for attempt 0, 1, ... of this launch, on `membership`'s roster; ports chosen once (unless given) and
    kept while they stay free. Attempt 0's plan is made once: the launch checks it (and the preflight its ports)
    before it starts it."""
    run_dir = Path(place.run_dir)
    first = next_attempt(run_dir)
    ports = choose_free_ports(spec) if ports is None else ports
    rehearsed = {fault.task: fault.to_env() for fault in faults or []}
    made: list[LaunchPlan] = []

    def plan(attempt: int) -> LaunchPlan:
        if attempt == 0 and made:
            return made[0]
        roster = dict(membership.roster) if membership is not None else None
        if attempt > 0:  # same ports if still free; a port-0 task whose port was taken gets another
            for name, port in list(ports.items()):
                if not port_is_free(port):
                    ports.update({n: free for n, free in choose_free_ports(spec, roster).items() if n == name})
            missing = {n: p for n, p in choose_free_ports(spec, roster).items() if n not in ports}
            ports.update(missing)  # a local spare that took a seat, in the spec's port 0
        inputs = PlanInputs(
            str(run_dir),
            first + attempt,
            sys.executable,
            place.cwd,
            dict(ports),
            faults=rehearsed if attempt == 0 else {},
            roster=roster,
        )
        result = build_plan(spec, inputs)
        check_local_ports(result)
        if attempt == 0:
            made.append(result)
        return result

    return plan


def requeueable(spec: ClusterSpec, allocation: Allocation) -> bool:
    """A preemption ends the run for Slurm to requeue: a batch job marked requeueable, unless the
    spec says to restart inside the allocation."""
    return (spec.slurm is None or spec.slurm.requeue) and allocation.requeueable()


def preflight(spec: ClusterSpec, plan: LaunchPlan, transport: Transport | None = None) -> PreflightReport:
    """Check every host (local ones too) and the run directory; leaves nothing behind.

    Given the launch's transport, the checks run over the connections the tasks will use."""

    if transport is not None:
        return run_preflight(spec, plan, transport)
    own = make_transport(spec, None, plan.run_dir)
    try:
        return run_preflight(spec, plan, own)
    finally:
        own.close()


def _checkpoint_dir_is_here(spec: ClusterSpec, plan: LaunchPlan) -> bool:
    """Whether the checkpoint directory is one of this machine's: not an object store, and written by a
    task here or inside the run directory (else the same path here may be another thing altogether)."""
    if is_url(plan.checkpoint_dir):
        return False
    return any(h.is_local for h in spec.hosts) or plan.checkpoint_dir.startswith(plan.run_dir.rstrip("/") + "/")


def _make_checkpoint_dir(spec: ClusterSpec, plan: LaunchPlan) -> RunLock | None:
    """Create the checkpoint directory when it is ours to create, and mark it for as long as we run."""
    if not _checkpoint_dir_is_here(spec, plan):
        return None
    # as the tasks would make it (their umask, 077 by default), not with the launcher's own umask
    os.makedirs(plan.checkpoint_dir, mode=0o777 & ~int(spec.umask, 8), exist_ok=True)
    return mark_checkpoints(spec, plan.run_dir, plan.checkpoint_dir)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SignalHandlers = dict[int, Any]  # what signal.signal returns: a callable, SIG_DFL/SIG_IGN or None


def _install_signals(supervisor: Supervisor, layout: RunLayout) -> SignalHandlers:
    """Signals become InterruptedLaunchError on the main thread; returns the handlers replaced
    (none when called off the main thread, where Python cannot install handlers)."""
    state = {"stopping": False}

    def handler(signum: int, frame: FrameType | None) -> None:
        if state["stopping"]:
            # a second signal skips the grace period; a third, the wait for SIGKILLed tasks too
            supervisor.give_up = supervisor.hurry
            supervisor.hurry = True
            return
        state["stopping"] = True
        by = None
        if signum == signal.SIGINT:  # `launch stop`'s?
            by = stop_requester(layout)
        raise InterruptedLaunchError(signum, by)

    if threading.current_thread() is not threading.main_thread():
        return {}
    # `nohup launch ...` ignores SIGHUP so that the run outlives its terminal: a hang-up stays no stop
    # (local agents lead process groups of their own: a shell's SIGHUP to the job does not reach them)
    kept = {signal.SIGHUP} if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else set()
    return {signum: signal.signal(signum, handler) for signum in _STOP_SIGNALS if signum not in kept}


def _restore_signals(previous: SignalHandlers) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def start_local_network(spec: ClusterSpec, plan: LaunchPlan, allocation: Allocation | None) -> NetworkStarting | None:
    """How a gang all on this machine is kept off the network (launcher/transport/local_network.py),
    made while the agents start; None under Slurm. The caller closes it once the tasks are gone."""
    return None if allocation is not None else NetworkStarting(spec.local_network, plan.tasks, plan.run_dir)


def make_transport(
    spec: ClusterSpec, allocation: Allocation | None, run_dir: str, network: NetworkStarting | None = None
) -> Transport:
    """An agent on every host: through a pipe (local hosts) or SSH; or, inside a Slurm allocation,
    one job step with an agent per node (its output kept in the run directory). Local tasks start in
    `network`'s private network, where it has one."""
    pythons = [host_python(spec, host, sys.executable) for host in machines(spec)]
    if allocation is None:
        return host_transport(spec, pythons, None if network is None else network.order)

    options = spec.slurm.srun_options if spec.slurm is not None else []
    medium = SlurmMedium(allocation.nodes, pythons, options, run_dir)
    return AgentTransport(agent_hosts(spec, pythons), medium, addressed=True)


def launch(
    spec: ClusterSpec,
    console: Console,
    faults: list[Fault] | None = None,
    allocation: Allocation | None = None,
    once_checked: Callable[[], None] | None = None,
    place: RunPlace | None = None,
) -> RunResult:
    """Preflight, then supervise every attempt until the run ends; always writes summary.json.

    `once_checked` runs when the preflight passed, before the run directory is written: what may
    refuse the run's old files or move them aside (`--fresh`), so a mistake the preflight finds
    costs nothing. `place`: where the run lives, as the caller decided it (else decided here, once).
    Raises PreflightError (nothing written, nothing started), RunDirError (the run directory cannot
    be written; nothing started) or InterruptedLaunchError (every task stopped, summary written)."""
    place = place_of(spec) if place is None else place
    refuse_run_dir(place.run_dir)  # before anything is read from it, and before the preflight
    ports = choose_free_ports(spec)
    membership = membership_of(spec)
    planner = make_planner(spec, place, faults, ports, membership)
    first_plan = planner(0)  # validates local ports before anything starts (raises PortInUseError)
    with contextlib.ExitStack() as unstarted:  # closed only when the launch ends before its tasks start
        network = start_local_network(spec, first_plan, allocation)
        if network is not None:
            unstarted.callback(network.close)
        transport = make_transport(spec, allocation, place.run_dir, network)
        unstarted.callback(transport.close)
        report = preflight(spec, first_plan, transport)
        if network is not None and (made := network.result()) is not None:
            report.lines.append(made.says)  # kept in preflight.json, with the ports
            if made.warning is not None:
                console.notice(made.warning)
        if not report.ok:
            raise PreflightError(report.problems)
        inputs = PlanInputs(place.run_dir, first_plan.attempt, sys.executable, place.cwd, ports)  # for spares' checks
        spare_tasks = _check_spares(spec, inputs, transport, membership, console) if membership else ()
        if once_checked is not None:
            once_checked()
            if next_attempt(Path(place.run_dir)) != first_plan.attempt:  # --fresh moved the earlier attempts aside
                planner = make_planner(spec, place, faults, ports, membership)  # the ports the preflight checked
                first_plan = planner(0)
        lock, mark = _claim_run_dir(spec, first_plan, report, unstarted)
        unstarted.pop_all()  # the supervisor closes the transport; the run's end releases the lock and mark
    covered = planner if network is None else _covered(planner, network)
    supervisor, requests = _supervisor(spec, console, covered, transport, allocation, membership, inputs, spare_tasks)
    with contextlib.ExitStack() as held:
        held.callback(lock.release)
        requests.start()
        held.callback(requests.close)
        if mark is not None:
            held.callback(mark.release)
        if network is not None:  # the supervisor closed the transport: every task is gone
            held.callback(network.close)
        return _supervise(spec, console, supervisor, first_plan)


def _supervisor(
    spec: ClusterSpec,
    console: Console,
    planner: Planner,
    transport: Transport,
    allocation: Allocation | None,
    membership: Membership | None,
    inputs: PlanInputs,
    spare_tasks: tuple[TaskLaunch, ...],
) -> tuple[Supervisor, StackRequests]:
    """The run's supervisor, and what answers `launch stacks` (given the running tasks between events)."""
    requests = StackRequests(inputs.run_dir, transport)
    supervisor = Supervisor(
        planner=planner,
        transport=transport,
        policy=RestartPolicy(spec.restart, spec.training.kind),
        reports_progress=isinstance(spec.training, (BuiltinTraining, FunctionTraining)),
        on_output=console.output,
        on_notice=console.notice,
        on_report=console.report,
        on_drained=lambda: _drained(console, requests, supervisor),
        echoes=console.echoes,
        sleep=console.wait,
        preemption_ends_run=allocation is not None and requeueable(spec, allocation),
        host_loss=_host_loss(spec, membership, transport, inputs, spare_tasks),
    )
    return supervisor, requests


def _drained(console: Console, requests: StackRequests, supervisor: Supervisor) -> None:
    console.flush()
    requests.publish(lambda: _running(supervisor))


def _running(supervisor: Supervisor) -> tuple[list[TaskLaunch], list[TaskStatus], float]:
    """The tasks running now: their launches and statuses, and the supervisor's clock."""
    status = supervisor.snapshot()
    if status is None:
        return [], [], 0.0
    running = [t for t in status.tasks if t.running and not status.stopping]
    names = {t.name for t in running}
    return [t for t in supervisor.plan.tasks if t.name in names], running, status.now


def _host_loss(
    spec: ClusterSpec,
    membership: Membership | None,
    transport: Transport,
    inputs: PlanInputs,
    spare_tasks: tuple[TaskLaunch, ...],
) -> HostLoss | None:
    if membership is None:
        return None
    grow_back = _grow_back(spec, membership, transport, inputs)
    return HostLoss(membership, grow_back, _free_spares_tasks(membership, spare_tasks))


def _free_spares_tasks(membership: Membership, tasks: tuple[TaskLaunch, ...]) -> Callable[[], list[TaskLaunch]]:
    """What each free spare host would run (in the first seat of its shape, `tasks`), for its warm standbys."""

    def free() -> list[TaskLaunch]:
        now, seated = time.time(), set(membership.roster.values())
        out = {m for m, e in membership.excluded.items() if e.until > now}
        return [task for task in tasks if task.host_index not in seated | out]

    return free


def _grow_back(
    spec: ClusterSpec, membership: Membership | None, transport: Transport, inputs: PlanInputs
) -> GrowBack | None:
    """An elastic gang of the built-in runtime (which saves on SIGTERM) takes a machine back at a checkpoint."""
    if membership is None or spec.elastic is None or not isinstance(spec.training, BuiltinTraining):
        return None

    def check(seat: int, roster: dict[int, int]) -> str | None:
        return check_seat(spec, inputs, transport, roster, seat)

    return GrowBack(membership, check, spec.training.checkpoint_every)


def _check_spares(
    spec: ClusterSpec, inputs: PlanInputs, transport: Transport, membership: Membership, console: Console
) -> tuple[TaskLaunch, ...]:
    """The spares' preflight: one that fails is kept out (for a cooldown) and said, the run goes on. Returns
    what the spares would run, each in the first seat of its shape (for their warm standbys)."""
    if not spec.spare_hosts:
        return ()
    plan = spare_plan(spec, inputs)
    for machine, problems in check_spares(spec, plan, transport).items():
        out = membership.keep_out(machine, f"failed the preflight: {problems}", time.time())
        console.notice(f"spare host {out.host} is kept out for {out.until - out.at:g}s: {problems}")
    return plan.tasks


def _covered(planner: Planner, network: NetworkStarting) -> Planner:
    """Plans whose local ports the network keeps from other machines, a port replaced on a restart too."""

    def plan(attempt: int) -> LaunchPlan:
        made = planner(attempt)
        opened = network.result()
        if attempt > 0 and opened is not None:
            opened.cover([task.port for task in made.tasks if task.is_local])
        return made

    return plan


def _claim_run_dir(
    spec: ClusterSpec, first_plan: LaunchPlan, report: PreflightReport, held: contextlib.ExitStack
) -> tuple[RunLock, RunLock | None]:
    """Make the run directory (the owner's alone), lock it, keep the launch record and mark the checkpoint
    directory; RunDirError (nothing started) when the disk or a permission refuses."""
    try:
        make_private_dir(first_plan.run_dir)  # logs hold whatever tasks print: for the owner only
        refuse_run_dir(first_plan.run_dir, OWNED)
        lock = lock_run(first_plan.run_dir)
        held.callback(lock.release)
        with contextlib.suppress(FileNotFoundError):  # an earlier launcher's, never read: not meant for us
            os.unlink(RunLayout(first_plan.run_dir).stop_request_file)
        write_launch_record(spec, report, first_plan.run_dir)  # for a post-mortem (`launch bundle`)
        return lock, _make_checkpoint_dir(spec, first_plan)  # held, with the run's lock, until the run ends
    except OSError as error:  # a full disk, no permission: before any task, so say so and start none
        raise RunDirError(error.filename or first_plan.run_dir, error.strerror or str(error)) from error


def _supervise(spec: ClusterSpec, console: Console, supervisor: Supervisor, first_plan: LaunchPlan) -> RunResult:
    """Run the gang to its end, with signals turned into a stop; the summary is written however it ends."""
    layout = RunLayout(first_plan.run_dir)
    console.attach(supervisor.snapshot, layout.status_file, first_plan.tasks)
    logs = os.path.dirname(first_plan.tasks[0].log_path) if first_plan.tasks else first_plan.run_dir
    console.notice(
        f"run {spec.name}: starting {len(first_plan.tasks)} task(s); logs in {logs} "
        f"(`launch logs {shlex.quote(first_plan.run_dir)}` shows them)"
    )
    previous = _install_signals(supervisor, layout)
    try:
        return supervisor.run()
    finally:
        try:
            console.close(succeeded=supervisor.state is LaunchState.SUCCEEDED)
            if supervisor.result is not None:
                _write_summary(supervisor.result, console, layout)
        finally:
            _restore_signals(previous)
            with contextlib.suppress(OSError):  # a `launch stop` that came when the run was already ending
                os.unlink(layout.stop_request_file)


def _write_summary(result: RunResult, console: Console, layout: RunLayout) -> None:
    try:
        console.notice(f"summary: {write_summary(result)}")
    except OSError as error:  # a full disk: the run's outcome stands, only its record is lost
        console.notice(
            f"cannot write the summary {layout.summary_file} ({error.strerror}): `launch status` will not know how "
            "this run ended; what follows says it"
        )
