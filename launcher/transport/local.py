"""Start tasks on this machine, each in its own process group under the task_runner helper.

The helper leads the task's process group and holds a lifeline pipe to the launcher: when the
launcher dies, even by SIGKILL, the pipe closes and the helper kills the group. TF_CONFIG goes
into the task's environment only, never into the launcher's. Output is read line by line,
written to the attempt's log file and handed to the sink with the task's name. A task may also
start in a standby helper made during the previous attempt (transport/standby.py), which runs it
in its warm spare.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from launcher.agent import task_runner
from launcher.agent.bootstrap import helper_argv
from launcher.plan import TaskLaunch
from launcher.private_files import make_private_dir
from launcher.transport.base import EventSink, ExitStatus, HelperChannel
from launcher.transport.standby import SpareWatch, StandbyPool, standby_header, task_header
from launcher.transport.streams import TaskStreams
from worker.contract import EVENT_FD_VAR

log = logging.getLogger(__name__)

_HELPER = str(Path(task_runner.__file__).resolve())
# Each task gets a process group of its own (so a stop reaches all of it and nothing else), but
# stays in the launcher's session: Linux schedules every session as its own CPU group
# (autogroup), which measurably slowed two synchronous workers sharing two cores.
_OWN_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` is still running (zombies do not count)."""
    import psutil  # only needed at the end of a task; keeps the launcher's start-up short

    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):  # exited while we looked
            continue
    return False


class LocalStandby:
    """A local helper in standby mode (see transport/standby.py): its spare imports meanwhile."""

    def __init__(self, launch: TaskLaunch) -> None:
        self.launch = launch
        read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", _HELPER, "--standby"],
                cwd=os.path.expanduser(launch.cwd),
                env={**os.environ, EVENT_FD_VAR: str(write_fd)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                **_OWN_GROUP,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self.events = os.fdopen(read_fd, "rb")
        self.watch = SpareWatch(self.events, launch.name)
        self.send(standby_header(launch, None))

    def send(self, header: dict) -> None:
        assert self.proc.stdin is not None  # stdin=PIPE
        self.proc.stdin.write((json.dumps(header) + "\n").encode())
        self.proc.stdin.flush()

    def close(self) -> None:
        """Its helper reads EOF and kills its group, spare included."""
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except BrokenPipeError:  # the helper already exited
                pass
        self.proc.wait()
        self.watch.finish()  # the helper's end of the event pipe is closed: the reader is done
        self.events.close()


class LocalTask:
    """One running local task. Invariant: after `gone()` is true, no process of it remains."""

    def __init__(self, launch: TaskLaunch, sink: EventSink, standby: LocalStandby | None = None) -> None:
        """`standby`: a standby made for this task, which runs it (in its spare when it can)."""
        self.launch = launch
        make_private_dir(Path(launch.log_path).parent)
        if standby is not None:
            standby.send(task_header(launch))  # OSError: the standby is gone; the caller starts cold
            standby.watch.finish()
            self._proc = standby.proc
            events = standby.events
        else:
            self._proc, events = self._start_cold(launch)
        self.pid = self._proc.pid
        self.started_at = time.time()
        assert self._proc.stdout is not None
        self._streams = TaskStreams(launch.name, launch.log_path, sink, self._proc.stdout, events, self._wait)

    @staticmethod
    def _start_cold(launch: TaskLaunch) -> tuple[subprocess.Popen[bytes], Any]:
        read_fd, write_fd = os.pipe()
        env = {**os.environ, **launch.env, EVENT_FD_VAR: str(write_fd)}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", _HELPER, "--", *launch.argv],
                cwd=os.path.expanduser(launch.cwd),
                env=env,
                stdin=subprocess.PIPE,  # the lifeline: closes when the launcher dies
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                **_OWN_GROUP,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return proc, os.fdopen(read_fd, "rb")

    def _wait(self) -> ExitStatus:
        status = self._proc.wait()
        # used only when the helper sent no exit report: it was killed itself (a SIGKILL to the group)
        return ExitStatus(None, -status) if status < 0 else ExitStatus(status, None)

    def signal(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:  # the whole group has already exited
            pass

    def gone(self) -> bool:
        return self._proc.poll() is not None and not group_alive(self.pid)

    def close(self) -> None:
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except BrokenPipeError:  # helper already exited
                pass


def _open_local_helper(python: str) -> HelperChannel:
    try:
        proc = subprocess.Popen(
            helper_argv(python), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as error:
        raise RuntimeError(f"cannot run python {python!r}: {error.strerror}") from None
    return pipe_channel(proc)


def pipe_channel(proc: subprocess.Popen[bytes]) -> HelperChannel:
    """A helper session over a child's pipes (a local python, or an srun step's one task)."""
    stdin = proc.stdin
    assert stdin is not None  # stdin=PIPE

    def write(data: bytes) -> None:
        stdin.write(data)
        stdin.flush()

    def close() -> None:
        try:
            stdin.close()
        except OSError:  # the helper already exited
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a helper that never answers: not ours to keep
            proc.kill()
            proc.wait()

    return HelperChannel(write, proc.stdout, proc.stderr, close)


class LocalTransport:
    """Starts tasks on this machine, in a standby prepared for the task when there is one."""

    def __init__(self) -> None:
        self.standbys = StandbyPool(LocalStandby)

    def start(self, launch: TaskLaunch, sink: EventSink) -> LocalTask:
        log.debug("starting %s: %s", launch.name, launch.argv)
        standby = self.standbys.take(launch)
        if standby is not None:
            assert isinstance(standby, LocalStandby)
            try:
                return LocalTask(launch, sink, standby)
            except OSError as error:  # the standby died meanwhile: start cold
                log.debug("standby for %s unusable (%s); starting cold", launch.name, error)
                standby.close()
        return LocalTask(launch, sink)

    def open_helper(self, host_index: int, python: str) -> HelperChannel:
        """A bootstrap session on this machine (`host_index` names which local host entry asked)."""
        return _open_local_helper(python)

    def close(self) -> None:
        """Close the standbys; each LocalTask owns its own resources."""
        self.standbys.clear()
