"""Run the gang: start every task, watch one event queue, decide, act; repeat per attempt.

`step()` is one observe-decide-act iteration and can be driven by tests against a fake
transport. Stopping is always: SIGTERM to every task's group, one monotonic deadline, SIGKILL,
wait until the groups are empty. `shutdown()` runs in `finally` and leaves no task behind.
The supervisor never asks which transport it holds and never prints: output goes to callbacks.
"""

from __future__ import annotations

import functools
import logging
import math
import queue
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from launcher.common.errors import HostError, InterruptedLaunchError
from launcher.common.private_files import make_private_dir
from launcher.plan import LaunchPlan, TaskLaunch
from launcher.supervise import hang
from launcher.supervise.gang import AttemptResult, GangStatus, LaunchState, RunResult, TaskStatus
from launcher.supervise.membership import Change
from launcher.supervise.policy import PREEMPTED_SAYS, Action, Decision, FailureKind, RestartPolicy, ended
from launcher.supervise.records import RecordFiles
from launcher.supervise.recovery import FIRST_STEP, RestartTimes, why_cold
from launcher.supervise.regroup import NOT_COUNTED, HostLoss, regroup
from launcher.supervise.tracked import (
    TrackedTask,
    as_injected,
    error_of,
    exception_in_log,
    names_of,
    read_json,
    recovery_of,
    step_time,
    task_result,
)
from launcher.transport.base import (
    Event,
    ExitStatus,
    OutputLine,
    TaskExited,
    Transport,
    UnreachedTask,
    WorkerReport,
)
from worker.contract import (
    CONTINUED,
    JOINED,
    PROGRESS_EVENTS,
    RECORD,
    RESTORED,
    START_MILESTONES,
    STEP,
    STOPPED,
    USAGE,
    WARM,
)

log = logging.getLogger(__name__)

OutputCallback = Callable[[TaskLaunch, str], None]
# Bounded so a task flooding its output cannot grow the launcher's memory: readers wait (and the
# task's pipe fills) until the supervisor catches up. Every line still reaches the log file.
_QUEUE_LIMIT = 4096
NoticeCallback = Callable[[str], None]
_KILL_WAIT_S = 10.0
_QUIET_STOP_S = 1.0  # a stop that takes longer says what it waits for
_HELPER_REPORTS = (STOPPED, CONTINUED)


class Supervisor:
    """Owns the tasks of one launch across attempts.

    Lifecycle: `start()` -> `step()` until `state.is_terminal` -> `shutdown()` (idempotent).
    Invariant: at most one attempt's tasks exist at a time; a new attempt starts only after
    every process of the previous one is gone.
    """

    def __init__(
        self,
        planner: Callable[[int], LaunchPlan],
        transport: Transport,
        policy: RestartPolicy,
        reports_progress: bool,
        on_output: OutputCallback | None = None,
        on_notice: NoticeCallback | None = None,
        on_report: Callable[[TaskLaunch, dict[str, Any]], None] | None = None,
        on_drained: Callable[[], None] | None = None,
        echoes: Callable[[TaskLaunch, str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        preemption_ends_run: bool = False,
        host_loss: HostLoss | None = None,
    ) -> None:
        """`echoes`: whether `on_output` would show a line (a muted line that it would not show is not counted
        as hidden). `preemption_ends_run`: after a preemption (every task saved) end the run as PREEMPTED
        instead of restarting, for a scheduler that requeues it (Slurm)."""
        self._preemption_ends_run = preemption_ends_run
        self.membership = host_loss.membership if host_loss else None  # the planner plans on its roster
        self._regrouped: Change | None = None  # the roster's change the restart being made comes from
        self._grow_back = host_loss.grow_back if host_loss else None
        self._spare_hosts_tasks = host_loss.spare_hosts_tasks if host_loss else list  # their warm standbys
        self._growing = False  # every task was told to save and leave, to restart with a machine taken back
        self._planner = planner
        self._transport = transport
        self._records: RecordFiles | None = None  # the run's metrics and eval rows, from the tasks' reports
        self._policy = policy
        self._reports_progress = reports_progress
        self._on_output = on_output or (lambda launch, line: None)
        self._on_notice = on_notice or (lambda text: None)
        self._on_report = on_report or (lambda launch, data: None)
        self._on_drained = on_drained or (lambda: None)
        self._echoes = echoes or (lambda launch, line: True)
        self._clock = clock
        self._sleep = sleep
        self._events: queue.Queue[tuple[TrackedTask, Event]] = queue.Queue(maxsize=_QUEUE_LIMIT)
        self._tasks: dict[str, TrackedTask] = {}
        self._plan: LaunchPlan | None = None
        self._attempt_index = 0
        self._attempt_started_at = 0.0
        self.restarts = 0
        self._restart_at: float | None = None
        self._unproductive = 0  # restarts in a row after attempts that made no step: what backoff doubles on
        self.preemptions = 0
        self._causes: list[str | None] = []  # root-cause signature of each restarted (not preempted) attempt
        self.hurry = False  # set on a second interrupt: skip the grace period
        self.give_up = False  # set on a third: stop waiting even for SIGKILLed tasks (a host that hangs)
        self._stop_asked = False  # told to stop from outside: tasks still running after the grace period ignored it
        self._interrupted = False  # stopping because the launcher was told to stop
        self._stopping = False  # in stop_all: what the status shows while tasks are given time to leave
        self.state = LaunchState.STARTING
        self.result: RunResult | None = None
        self._restart_times: RestartTimes | None = None  # how the current attempt came about, if by a restart
        self._spares_asked = False
        self._why_no_spare = ""  # for the restart being made: why a task that ran cold had no spare
        self._trained_since: float | None = None
        self._decided_at = 0.0
        self._last_hang: dict[str, Any] | None = None  # the launch's latest, for the status file

    # ---- observe ---------------------------------------------------------------------------

    @property
    def plan(self) -> LaunchPlan:
        assert self._plan is not None, "start() first"
        return self._plan

    def snapshot(self) -> GangStatus | None:
        """The current status, or None before the first attempt has started."""
        return self.status() if self._plan is not None else None

    def status(self) -> GangStatus:
        return GangStatus(
            attempt=self.plan.attempt,
            restarts=self.restarts,
            preemptions=self.preemptions,
            now=self._clock(),
            reports_progress=self._reports_progress,
            tasks=tuple(self._task_status(t) for t in self._tasks.values() if not t.launch.sidecar),
            earlier_causes=tuple(self._causes),
            spares=self._transport.spares(),
            stopping=self._stopping,
            idle_attempts=self._unproductive,
            restart_at=self._restart_at,
            excluded=tuple(self.membership.records()) if self.membership is not None else (),
            step_time_s=max((s for t in self._tasks.values() if (s := step_time(t)) is not None), default=None),
            last_hang=self._last_hang,
        )

    def _task_status(self, t: TrackedTask) -> TaskStatus:
        """The task's snapshot, made anew only after something in it changed (a gang of a thousand
        tasks is snapshotted at every step): whatever changes a task drops its snapshot. Its pid
        is the one thing a transport learns without an event (the agent's `started`)."""
        pid = t.process.pid if t.process else None
        if t.snapshot is None or t.snapshot.pid != pid:
            t.snapshot = TaskStatus(
                t.launch.name,
                t.launch.host,
                pid,
                t.joined or not self._reports_progress,
                t.step,
                t.exit,
                t.started_mono,
                t.last_progress,
                t.reported,
                t.milestone,
                t.stopped_since,
                t.error,
            )
        return t.snapshot

    def _apply(self, task: TrackedTask, event: Event) -> None:
        if self._tasks.get(task.launch.name) is not task:  # a straggler from an earlier attempt
            return
        task.snapshot = None
        if isinstance(event, OutputLine):
            if not self._reports_progress:
                task.last_progress = self._clock()
            if task.muted is None:
                self._on_output(task.launch, event.line)
            elif self._echoes(task.launch, event.line):
                task.muted += 1
        elif isinstance(event, WorkerReport):
            kind = event.data.get("event")
            if kind in _HELPER_REPORTS:  # from the helper watching the task, not from the runtime
                task.stopped_since = self._clock() if kind == STOPPED else None
                self._on_report(task.launch, event.data)
                return
            if kind in (WARM, USAGE):  # the agent's: whether the task runs in a warm spare; its CPU and memory
                task.warm = event.data if kind == WARM else task.warm
                self._on_report(task.launch, event.data)
                return
            task.reported = True
            if kind in (*START_MILESTONES, RESTORED):
                task.times.setdefault(str(kind), time.time())
                task.last_progress = self._clock() if kind == RESTORED else task.last_progress  # a restore is progress
            elif kind in PROGRESS_EVENTS:
                task.times.setdefault(FIRST_STEP, time.time())
            if kind == RECORD:
                if self._records is not None:
                    self._records.append(event.data)
                return
            if kind in START_MILESTONES:
                task.milestone = kind
            if kind == JOINED:
                task.joined = True
                task.last_progress = self._clock()
            elif kind in PROGRESS_EVENTS and isinstance(event.data.get("step"), int):
                task.step = event.data["step"]
                task.last_progress = self._clock()
                task.first_step = task.first_step or (task.last_progress, task.step)
                task.joined = task.joined or kind == STEP  # a step is trained in the gang: a script says no more
            self._on_report(task.launch, event.data)
        elif isinstance(event, TaskExited):
            task.exit = as_injected(task.launch, event.exit)
            task.error_file = read_json(task.launch.error_path)
            task.error = error_of(task.error_file)
            if task.error is None and self._exited_on_its_own(task, event.exit):
                task.error = exception_in_log(task.launch.log_path)  # a script of the user's: no error file
            log.debug("%s exited: %s", event.task, event.exit.describe())
            if task.launch.sidecar and not event.exit.ok and not task.stopped:
                self._on_notice(
                    f"side-car {task.launch.name} {event.exit.describe()} (training goes on; see "
                    f"{task.launch.log_path})"
                )

    def _exited_on_its_own(self, task: TrackedTask, exit: ExitStatus) -> bool:
        """A failing exit code of the task's own (not a signal, a lost host, a stop or a preemption)."""
        ended_itself = exit.code not in (0, None, self._policy.spec.preemption_exit_code)
        return ended_itself and exit.lost is None and not task.stopped

    def _pump(self, timeout: float) -> None:
        """Apply every queued event, waiting up to `timeout` for the first one. The drained
        callback runs after a quiet wait too: the status a quiet gang shows still moves."""
        try:
            self._apply(*self._events.get(timeout=max(timeout, 0.0)))
        except queue.Empty:
            self._on_drained()
            return
        while True:
            try:
                self._apply(*self._events.get_nowait())
            except queue.Empty:
                self._on_drained()
                return

    def _deliver(self, task: TrackedTask, event: Event) -> None:
        """The sink handed to the transport for one task (called from reader threads)."""
        self._events.put((task, event))

    # ---- act -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start attempt 0."""
        self._start_attempt(0)

    def _start_attempt(self, attempt: int) -> None:
        """`attempt` counts this launch's attempts from 0; the plan numbers them after the run's earlier
        launches."""
        self._attempt_index = attempt
        self._plan = self._planner(attempt)
        if self._records is None:
            self._records = RecordFiles(self._plan.run_dir)
        self._tasks = {launch.name: TrackedTask(launch) for launch in self._plan.tasks}
        self._spares_asked = self._growing = False
        self._hang: hang.Hang | None = None  # the attempt's hang, once named: its stacks and the task behind
        if self._grow_back is not None:
            self._grow_back.new_attempt()
        self._trained_since = None  # (monotonic) when the attempt's start-up was over
        self._attempt_started_at = time.time()
        self.state = LaunchState.STARTING
        make_private_dir(self._plan.attempt_dir)
        tasks = list(self._tasks.values())
        for task in tasks:
            task.started_mono = task.last_progress = self._clock()
            task.started_at = time.time()
        outcomes = self._transport.start_all([(t.launch, functools.partial(self._deliver, t)) for t in tasks])
        for task, outcome in zip(tasks, outcomes, strict=True):
            if isinstance(outcome, HostError):  # counted as a lost host, like a connection that drops mid-run
                task.process = UnreachedTask(task.launch)
                lost = ExitStatus(None, None, lost=f"cannot start: {outcome}")
                self._deliver(task, TaskExited(task.launch.name, lost))
            else:
                task.process = outcome
        log.info("attempt %d: started %d tasks", attempt, len(self._tasks))

    def step(self, timeout: float = 0.5) -> LaunchState:
        """One iteration: wait up to `timeout` for events, decide, act. Returns the new state."""
        self._pump(timeout)
        status = self.status()
        if self.state is LaunchState.STARTING and not status.unjoined:
            self.state = LaunchState.RUNNING
        self._prepare_spares()
        decision = self._policy.decide(status)
        if decision.action is Action.KEEP_GOING:
            self._maybe_grow(status)
            return self.state
        self._regrouped = None
        if decision.kind in (FailureKind.STALLED, FailureKind.START_TIMEOUT):
            decision = self._name_the_hang(decision, status)
        if self._growing and decision.kind is FailureKind.PREEMPTED and self._grow_back is not None:
            saved = f"host {self._grow_back.rejoined} rejoins: every task saved ({decision.reason})"
            decision = replace(decision, reason=saved)
        if self.membership is not None and self.membership.active:
            decision, self._regrouped = regroup(
                self.membership, decision, status, self._tasks, self._transport, time.time, self._on_notice
            )
        self._decided_at = time.time()
        wait = self._count_restart(decision) if decision.action is Action.RESTART else 0.0  # said before the stop
        self._finish_attempt(decision)
        if decision.action is Action.SUCCEED:
            self.state = LaunchState.SUCCEEDED
        elif decision.action is Action.FAIL:
            self.state = LaunchState.FAILED
        elif self.state is not LaunchState.PREEMPTED:  # a preemption that ends the run is not restarted
            self._restart(decision, wait)
        return self.state

    def _name_the_hang(self, decision: Decision, status: GangStatus) -> Decision:
        """Before anything is killed: every running task's stacks, and the task behind named (hang.py)."""
        running = [t for t in status.tasks if t.running]
        self._hang = hang.name(self._transport, [self._tasks[t.name].launch for t in running], running, status.now)
        self._last_hang = {"attempt": self.plan.attempt, **self._hang.to_json()}
        return hang.named_in(decision, self._hang)

    def _maybe_grow(self, status: GangStatus) -> None:
        """Take a machine back into a vacant seat (grow_back.py): every task saves at its next step and leaves."""
        if self._grow_back is None or self._growing or self.state is not LaunchState.RUNNING:
            return
        if self._grow_back.poll(status, time.time(), self._on_notice):
            self._growing = True
            for task in self._tasks.values():
                if task.process is not None and task.exit is None and not task.launch.sidecar:
                    task.process.signal(signal.SIGTERM)

    def _prepare_spares(self) -> None:
        """Once per attempt, `restart.warm_spares_after_s` after its start-up is over (every training task
        reported a step), ask for the next attempt's warm spares, for the tasks still running: they
        import at low priority, and would otherwise slow the restore and tracing they exist to
        hasten. A task that reports no step (a script that never calls `report`) gets none: nothing
        says it trains, and a spare costs an imported TensorFlow."""
        if self._spares_asked or self.state is not LaunchState.RUNNING:
            return
        trainers = [t for t in self._tasks.values() if not t.launch.sidecar]
        if not trainers or not all(FIRST_STEP in t.times for t in trainers):
            return
        if self._trained_since is None:
            self._trained_since = self._clock()
        if self._clock() - self._trained_since < self._policy.spec.warm_spares_after_s:
            return
        self._spares_asked = True
        running = [t.launch for t in self._tasks.values() if t.exit is None]
        self._transport.prepare_spares(running + self._spare_hosts_tasks())

    def _made_progress(self) -> bool:
        """Whether every training task of this attempt reported a step (a script that reports nothing
        cannot tell: it backs off as in a crash loop)."""
        trainers = [t for t in self._tasks.values() if not t.launch.sidecar]
        return bool(trainers) and all(FIRST_STEP in t.times for t in trainers)

    def _count_restart(self, decision: Decision) -> float:
        """Count a restart (or a preemption) and say why, before its stop says what it waits for;
        returns how long to wait before the next attempt starts."""
        self.state = LaunchState.RESTARTING
        if decision.kind is FailureKind.PREEMPTED and self._growing:  # saved to take a machine back
            self._on_notice(f"{decision.reason}; restarting every task on the larger gang")
            return 0.0
        if decision.kind is FailureKind.PREEMPTED:
            self.preemptions += 1
            if self._preemption_ends_run:
                self._on_notice(f"{decision.reason}; every task saved: the run ends here to be requeued")
                self.state = LaunchState.PREEMPTED
                return 0.0
        elif self._regrouped is not None and self._regrouped.first:  # a host gone for good: a new gang, a clean slate
            self._causes.clear()
        else:
            self.restarts += 1
            self._causes.append(decision.signature)
        # a crash loop backs off, and so do preemptions in a row that trained nothing (a script's own exit
        # code taken for a preemption's); an attempt that trained before it ended is restarted at once
        self._unproductive = 0 if self._made_progress() else self._unproductive + 1
        wait = self._policy.backoff_s(self._unproductive - 1) if self._unproductive else 0.0
        hint = ""
        if decision.kind is FailureKind.PREEMPTED and self._unproductive >= 2:
            code = self._policy.spec.preemption_exit_code
            hint = (
                f" ({self._unproductive} preemptions in a row before any training step: if {code} is an exit code of "
                "the training's own, set restart.preemption_exit_code to another)"
            )
        counted = f" ({NOT_COUNTED})" if self._regrouped is not None and self._regrouped.first else ""
        self._on_notice(
            f"{decision.reason}; restarting every task" + (f" in {wait:g}s" if wait else "") + counted + hint
        )
        return wait

    def _restart(self, decision: Decision, wait: float) -> None:
        stopped_at = time.time()
        self._why_no_spare = why_cold(self._policy.spec, self._spares_asked, self._trained_since is not None)
        failed = [t.exit.time for t in self._tasks.values() if t.exit is not None and not t.exit.ok and not t.stopped]
        if wait:
            self._restart_at = time.time() + wait  # `launch status` and the table say it backs off
            try:
                self._sleep(wait)
            finally:
                self._restart_at = None
        self._start_attempt(self._attempt_index + 1)
        self._restart_times = RestartTimes(
            decision.kind.value, min(failed) if failed else None, self._decided_at, stopped_at, self._attempt_started_at
        )

    def _finish_attempt(self, decision: Decision) -> None:
        """Stop what still runs, then record how every task of this attempt ended."""
        if decision.action is Action.FAIL:
            self._on_notice(decision.reason)
        if self._hang is not None and decision.kind is not FailureKind.NONE:  # after what the hang was
            self._on_notice(hang.where(self._hang, self.plan.attempt_dir))
        for task in self._tasks.values():
            # once stopped, stays so (a Ctrl-C during a restart's stop decides again)
            task.stopped = task.stopped or (
                task.exit is None and not (decision.action is Action.SUCCEED and task.launch.sidecar)
            )
        grace, send_term = self._policy.grace_s(decision)
        if decision.kind not in (FailureKind.NONE, FailureKind.PREEMPTED):
            for task in self._tasks.values():  # what they print as their peer's loss breaks them is noise
                if task.stopped and task.launch.name != decision.cause:  # a hung cause's last words count
                    task.muted = 0
        self.stop_all(grace, send_term=send_term)
        hidden = sum(task.muted or 0 for task in self._tasks.values())
        if hidden:
            self._on_notice(
                f"{hidden} line(s) the other tasks printed while they were stopped are only in their logs "
                f"({self.plan.attempt_dir})"
            )
        self._record(self._as_rehearsed(decision))

    def _as_rehearsed(self, decision: Decision) -> Decision:
        """An attempt ended for a peer of the task given a `launch --inject` fault (a preemption both save and
        leave from, the peer first; a kill whose peer's error came in before the kill's own exit, which its
        agent drains for a moment): recorded as that task's, once every exit is in."""
        if decision.kind not in (FailureKind.PREEMPTED, FailureKind.RETRYABLE) or decision.action is Action.SUCCEED:
            return decision
        faulted = [t for t in self._tasks.values() if t.exit is not None and t.exit.injected is not None]
        if not faulted or faulted[0].launch.name == decision.cause:
            return decision
        said = ended(self._task_status(faulted[0]))  # a crash's: what happened, then the restart's count as said
        preempted = decision.kind is FailureKind.PREEMPTED
        reason = f"{said} ({PREEMPTED_SAYS})" if preempted else decision.reason.replace(decision.what, said, 1)
        return replace(decision, cause=faulted[0].launch.name, reason=reason)

    def stop_all(self, grace_s: float, send_term: bool = True) -> None:
        """SIGTERM every live group, wait out one deadline, SIGKILL, wait until all are gone."""
        self._stopping = True
        try:
            self._stop_all(grace_s, send_term)
        finally:
            self._stopping = False

    def _stop_all(self, grace_s: float, send_term: bool) -> None:
        grace = 0.0 if self.hurry else grace_s
        live = [t for t in self._tasks.values() if t.process is not None and t.exit is None]
        for task in live if send_term else []:
            assert task.process is not None
            task.process.signal(signal.SIGTERM)
            task.signals_sent.add(signal.SIGTERM)
        deadline = self._clock() + grace
        self._await_exits(min(deadline, self._clock() + _QUIET_STOP_S))
        self._say_who_is_awaited([t for t in live if t.exit is None], deadline - self._clock())
        self._await_exits(deadline)
        stubborn = send_term and grace > 0 and self._stop_asked and not self.hurry  # a stop asked for; not a failure's
        ignored = [t for t in live if t.exit is None] if stubborn else []
        if ignored:  # where they were stuck, from their stacks, before SIGKILL
            found = hang.stacks_of(self._transport, [t.launch for t in ignored])
            self._hang = hang.merged(self._hang, found)
            trained = any(t.step for t in ignored)
            self._on_notice(hang.ignored_stop(names_of(ignored), grace, found, trained, self.plan.attempt_dir))
        cut_short = [t for t in live if t.exit is None] if self.hurry and grace > 0 else []
        if cut_short:
            self._on_notice(f"interrupted again: SIGKILL to {len(cut_short)} task(s) now, without their grace period")
        for task in self._tasks.values():
            if task.process is not None and (task.exit is None or not task.process.gone()):
                task.process.signal(signal.SIGKILL)
                if task.exit is None:
                    task.signals_sent.add(signal.SIGKILL)
        self._await_exits(self._clock() + _KILL_WAIT_S, cut_short_by_hurry=False)  # SIGKILL ends them soon
        for task in self._tasks.values():
            if task.process is not None and not task.process.gone():
                log.warning("%s (pid %s) survived SIGKILL wait", task.launch.name, task.process.pid)

    def _say_who_is_awaited(self, waiting: list[TrackedTask], left_s: float) -> None:
        """A stop that takes longer than a moment says what it waits for, and how to cut it short."""
        if not waiting or left_s <= 0 or self.hurry:
            return
        names = names_of(waiting)
        hint = "; a second Ctrl-C (or `launch stop`) kills them now" if self._interrupted else ""
        self._on_notice(f"waiting up to {math.ceil(left_s):d}s for {names} to exit, then SIGKILL{hint}")

    def _await_exits(self, deadline: float, cut_short_by_hurry: bool = True) -> None:
        while any(t.exit is None for t in self._tasks.values() if t.process is not None):
            remaining = deadline - self._clock()
            if remaining <= 0 or (self.hurry and cut_short_by_hurry) or self.give_up:
                return
            self._pump(min(remaining, 0.2))

    def _record(self, decision: Decision) -> None:
        tasks = [
            task_result(
                task, task.exit is not None and self._policy.classify(self._task_status(task)) is FailureKind.PREEMPTED
            )
            for task in self._tasks.values()
        ]
        recovery = None
        if self._restart_times is not None:  # how this attempt's restart spent its time (not for the first)
            recovery = recovery_of(self._restart_times, list(self._tasks.values()), self._why_no_spare)
        attempt = AttemptResult(
            self.plan.attempt,
            decision.reason,
            decision.cause,
            decision.kind.value,
            tuple(tasks),
            self._attempt_started_at,
            time.time(),
            recovery=recovery,
            hang=self._hang.to_json() if self._hang is not None else None,
            regrouped=decision.action is Action.RESTART
            and (
                (self._regrouped is not None and self._regrouped.first)
                or (self._growing and decision.kind is FailureKind.PREEMPTED)
            ),
        )
        if self.result is None:
            self.result = RunResult(self.plan.run_name, self.plan.run_dir, outputs=self.plan.outputs)
        self.result.attempts.append(attempt)

    def run(self, poll_s: float = 0.5) -> RunResult:
        """Start and supervise until a terminal state; always shuts down."""
        asked = False
        try:
            self.start()
            while not self.state.is_terminal:
                self.step(poll_s)
        except InterruptedLaunchError:
            asked = True
            raise
        finally:
            self.shutdown(asked)
        assert self.result is not None
        return self.result

    def shutdown(self, asked: bool = True) -> None:
        """Stop every task that still runs (idempotent; called from `finally`). `asked`: the launch was
        told to stop (Ctrl-C, `launch stop`, a signal), not ended by an error of its own."""
        if self._plan is None:
            return
        if any(t.exit is None for t in self._tasks.values() if t.process is not None):
            self._interrupted = True
            self._stop_asked = asked
            self._finish_attempt(Decision(Action.FAIL, FailureKind.NONE, None, "the launcher was interrupted"))
        if self.state is LaunchState.RESTARTING and self.result is not None and self.result.attempts:
            last = self.result.attempts[-1]  # its restart was said, and then the stop came first (in a backoff)
            if last.attempt == self.plan.attempt and last.kind != FailureKind.PREEMPTED.value and not last.regrouped:
                self.restarts -= 1
                self.result.attempts[-1] = replace(last, reason=f"{last.reason} (not made: stopped before it)")
        if not self.state.is_terminal:  # stopped from outside: tasks running, or waiting to restart
            self.state = LaunchState.INTERRUPTED
        if self.result is None:
            self.result = RunResult(self.plan.run_name, self.plan.run_dir, outputs=self.plan.outputs)
        self.result.state = self.state
        self.result.excluded = self.membership.records() if self.membership is not None else []
        for task in self._tasks.values():
            if task.process is not None:
                task.process.close()
        self._transport.close()
        if self._records is not None:
            self._records.close()
