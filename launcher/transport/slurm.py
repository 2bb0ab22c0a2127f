"""Start an attempt as one Slurm job step: every task a helper under one `srun`.

The step runs the same helper as SSH hosts (task_runner through the bootstrap): `srun --input=all`
gives every helper the helper's source and one table of every task's argv, cwd and environment
(nothing on a command line); each picks its entry by SLURM_PROCID. `SLURM_HOSTFILE` with
`--distribution=arbitrary` puts task i on the node the plan gave it. `--label` prefixes every line
with the task's number, so one reader splits srun's stdout (task output) and stderr (event lines)
back into per-task streams, each ending with the task's own `exit` report. Stops travel as
`signal N ID` lines on the shared stdin; closing it is the dead-man switch, and `scancel` of the
step is the last resort. The launcher stays the supervisor: it decides, Slurm only carries.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections import deque
from typing import Any

from launcher.agent import task_runner
from launcher.agent.bootstrap import helper_argv, source_line
from launcher.agent.task_runner import BEATS_PER_TIMEOUT
from launcher.errors import HostError
from launcher.plan import TaskLaunch
from launcher.private_files import open_private
from launcher.transport.base import EventSink, ExitStatus, HelperChannel, Started, StartRequest
from launcher.transport.local import pipe_channel
from launcher.transport.streams import MAX_LINE_BYTES, TaskStreams, write_mirrored
from worker.contract import END_LINE, EXIT, PING_LINE, SIGNAL_LINE

log = logging.getLogger(__name__)
_LABEL = re.compile(rb"^ *(\d+): ")
_END = END_LINE.encode()
_KILL_AFTER_S = 5.0  # a SIGKILL the helpers did not act on this long: scancel the step


class _Feed:
    """Byte lines for one task's reader, fed by the step's demultiplexer (file-like enough for
    TaskStreams: iteration and `readline(limit)`)."""

    def __init__(self) -> None:
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._rest = b""
        self._ended = False

    def put(self, line: bytes) -> None:
        self._lines.put(line)

    def end(self) -> None:
        self._lines.put(None)

    def readline(self, limit: int = -1) -> bytes:
        if not self._rest and not self._ended:
            item = self._lines.get()
            if item is None:
                self._ended = True
            else:
                self._rest = item
        cut = len(self._rest) if limit < 0 else min(limit, len(self._rest))
        line, self._rest = self._rest[:cut], self._rest[cut:]
        return line

    def __iter__(self) -> Any:
        return iter(self.readline, b"")


class _Step:
    """One `srun` running every task of an attempt, and the demultiplexing of its output."""

    def __init__(self, argv: list[str], env: dict[str, str], count: int, srun_log: str) -> None:
        self.out = [_Feed() for _ in range(count)]
        self.err = [_Feed() for _ in range(count)]
        self.done = [threading.Event() for _ in range(count)]
        self.step_id: str | None = None
        self.said: deque[str] = deque(maxlen=5)  # srun's own last lines, for the report
        self._srun_log = srun_log
        self._lock = threading.Lock()
        self._closed = 0
        self._count = count
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
            )
        except OSError as error:
            raise HostError("slurm", f"cannot run srun ({error.strerror}); is Slurm installed here?") from None
        self._readers = [
            threading.Thread(target=self._split, args=(self.proc.stdout, self.out, False), daemon=True),
            threading.Thread(target=self._split, args=(self.proc.stderr, self.err, True), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        threading.Thread(target=self._reap, daemon=True).start()

    def send(self, line: str) -> None:
        with self._lock:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(line.encode())
                self.proc.stdin.flush()
            except (OSError, ValueError):  # srun is gone or its stdin closed: nothing to tell
                pass

    def _split(self, stream: Any, feeds: list[_Feed], events: bool) -> None:
        """Route each labelled line to its task; a line's later pieces follow its first."""
        current: int | None = None
        with open_private(self._srun_log, "ab") as srun_log:
            for chunk in iter(functools.partial(stream.readline, MAX_LINE_BYTES), b""):
                match = _LABEL.match(chunk) if current is None else None
                if match is not None and int(match.group(1)) < len(feeds):
                    current, chunk = int(match.group(1)), chunk[match.end() :]
                if current is None:  # srun's own words ("srun: error: ...")
                    srun_log.write(chunk)
                    srun_log.flush()
                    self.said.append(chunk.decode("utf-8", "replace").strip())
                    continue
                task = current
                if chunk.endswith(b"\n"):
                    current = None
                if events:
                    feeds[task].put(chunk)
                    if b'"event": "' + EXIT.encode() + b'"' in chunk:
                        feeds[task].end()
                        self.done[task].set()
                elif chunk.rstrip(b"\n") == _END:
                    feeds[task].end()
                else:
                    feeds[task].put(chunk)

    def _reap(self) -> None:
        self.proc.wait()
        for reader in self._readers:
            reader.join(5)
        for feed in (*self.out, *self.err):
            feed.end()  # a second end is harmless: the reader stops at the first
        for done in self.done:
            done.set()

    def ended(self) -> bool:
        return self.proc.poll() is not None

    def release(self) -> None:
        """One task closed; when all are, close the shared stdin (the helpers' dead-man switch)."""
        with self._lock:
            self._closed += 1
            if self._closed == self._count:
                try:
                    assert self.proc.stdin is not None
                    self.proc.stdin.close()
                except OSError:  # already broken
                    pass

    def cancel(self, signum: int = signal.SIGKILL) -> None:
        """Have Slurm signal every process of the step (what the helpers could not do)."""
        if self.step_id is None or self.ended():
            return
        subprocess.run(
            ["scancel", f"--signal={signal.Signals(signum).name[3:]}", self.step_id],
            capture_output=True,
            timeout=30,
            check=False,
        )


class SlurmTask:
    """One task of a step. Invariant: `gone()` once it reported its exit or the step ended."""

    def __init__(self, step: _Step, rank: int, launch: TaskLaunch, sink: EventSink) -> None:
        self.launch = launch
        self.pid = 0
        self.started_at = time.time()
        self._step = step
        self._rank = rank
        self._lost: str | None = None
        self._released = False
        self._streams = TaskStreams(
            launch.name,
            launch.log_path,
            sink,
            step.out[rank],
            step.err[rank],
            self._wait,
            on_files=functools.partial(write_mirrored, launch),
            on_alive=self._alive,
        )

    @property
    def last_heard(self) -> float:
        return self._streams.last_heard

    def _alive(self, report: dict[str, Any]) -> None:
        if isinstance(report.get("pid"), int) and not self.pid:
            self.pid = report["pid"]
        if isinstance(report.get("step"), str):
            self._step.step_id = report["step"]

    def _wait(self) -> ExitStatus:
        self._step.done[self._rank].wait()
        said = "; ".join(s for s in self._step.said if s)
        return ExitStatus(
            None, None, lost=self._lost or f"the srun step ended before {self.launch.name} reported its exit: {said}"
        )

    def lose(self, why: str) -> None:
        self._lost = why
        self._step.cancel()

    def signal(self, signum: int) -> None:
        self._step.send(f"{SIGNAL_LINE} {signum} {self._rank}\n")
        if signum == signal.SIGKILL:
            timer = threading.Timer(_KILL_AFTER_S, self._kill_step_if_left)
            timer.daemon = True
            timer.start()

    def _kill_step_if_left(self) -> None:
        if not self.gone():
            self._step.cancel()

    def gone(self) -> bool:
        return self._step.done[self._rank].is_set()

    def close(self) -> None:
        if not self._released:
            self._released = True
            self._step.release()


class SlurmTransport:
    """Every task of an attempt in one srun step on the allocation's nodes (`nodes[i]` is the node
    of host i). Preflight probes run as single-task steps that overlap the rest."""

    def __init__(self, nodes: list[str], srun_options: list[str], liveness_s: float) -> None:
        self._nodes = nodes
        self._srun_options = srun_options
        self._liveness_s = liveness_s
        self._tasks: list[SlurmTask] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._beat, daemon=True, name="slurm-heartbeat").start()

    def prepare_spares(self, launches: list[TaskLaunch]) -> None:
        """No warm spares under Slurm: each attempt is a new job step, started cold."""

    def spares(self) -> tuple[int, int]:
        return 0, 0

    def start_all(self, requests: list[StartRequest]) -> list[Started]:
        launches = [launch for launch, _ in requests]
        attempt_dir = os.path.dirname(launches[0].log_path)
        hostfile = os.path.join(attempt_dir, "slurm-hostfile")
        with open_private(hostfile, "w") as handle:
            handle.write("".join(f"{self._nodes[launch.host_index]}\n" for launch in launches))
        used = sorted({self._nodes[launch.host_index] for launch in launches})
        argv = [
            "srun",
            f"--job-name={_step_name(launches[0])}",
            f"--nodes={len(used)}",
            f"--ntasks={len(launches)}",
            f"--nodelist={','.join(used)}",
            "--distribution=arbitrary",
            "--overcommit",
            "--label",
            "--input=all",
            "--kill-on-bad-exit=0",
            *self._srun_options,
            *helper_argv(launches[0].python, stdlib_only=True),
        ]
        try:
            step = _Step(argv, {**os.environ, "SLURM_HOSTFILE": hostfile}, len(launches), f"{attempt_dir}/srun.log")
        except HostError as error:
            return [error for _ in launches]
        table = {
            "tasks": [
                {
                    "argv": launch.argv,
                    "cwd": launch.cwd,
                    "env": launch.env,
                    "liveness_s": self._liveness_s,
                    "node": self._nodes[launch.host_index],
                }
                for launch in launches
            ]
        }
        step.send((source_line(task_runner) + (json.dumps(table) + "\n").encode()).decode())
        tasks = [SlurmTask(step, rank, launch, sink) for rank, (launch, sink) in enumerate(requests)]
        with self._lock:
            self._tasks = [t for t in self._tasks if not t.gone()] + tasks
        log.debug("srun step for %d tasks on %s", len(tasks), ",".join(used))
        return list(tasks)

    def open_helper(self, host_index: int, python: str) -> HelperChannel:
        """A single-task step on the host's node running the bootstrap (the preflight's probe)."""
        argv = [
            "srun",
            "--overlap",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={self._nodes[host_index]}",
            "--quiet",
            *self._srun_options,
            *helper_argv(python),
        ]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as error:
            raise HostError(self._nodes[host_index], f"cannot run srun ({error.strerror})") from None
        return pipe_channel(proc)

    def _beat(self) -> None:
        """Ping every helper (they leave on silence) and give up a task silent for the timeout."""
        tick = min(1.0, self._liveness_s / BEATS_PER_TIMEOUT)
        while not self._closed.wait(tick):
            with self._lock:
                tasks = [t for t in self._tasks if not t.gone()]
            steps = {id(t._step): t._step for t in tasks}
            for step in steps.values():
                step.send(f"{PING_LINE}\n")
            now = time.monotonic()
            for task in tasks:
                silent = now - task.last_heard
                if silent > self._liveness_s:
                    task.lose(
                        f"nothing from {task.launch.name} on {self._nodes[task.launch.host_index]} for {silent:.0f}s "
                        f"(ssh.liveness_timeout_s={self._liveness_s:g}): the node or the network to it is down"
                    )

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            tasks = list(self._tasks)
        for task in tasks:
            task.close()


def _step_name(launch: TaskLaunch) -> str:
    return f"tflaunch-{os.path.basename(os.path.dirname(os.path.dirname(launch.log_path)))}"
