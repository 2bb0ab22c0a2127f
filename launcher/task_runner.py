"""The helper that owns one task's process group and dies with its launcher.

Local start: `python -I -S task_runner.py -- CMD ARGS...`, in a new session, with the task's
environment already set. Remote start (over SSH): `python -c BOOTSTRAP` reads this file's source
and then a JSON header (argv, cwd, env) from standard input, so no environment value (TF_CONFIG,
secrets) ever appears on a command line; see `remote_main`.

Either way the helper leads the task's process group, starts the task in it and waits for it.
Its standard input is the lifeline to the launcher:

- a line `signal N` sends signal N to the whole group (how remote stops are forwarded);
- a line `ping` only says the launcher is still there;
- end of input (the launcher or the SSH connection is gone) kills the whole group with SIGKILL,
  so no task outlives its launcher (a dead-man switch);
- over SSH, silence as well: no line for the liveness timeout (a partition or a frozen host sends
  no EOF) kills the group the same way. The remote helper in turn reports `{"event": "alive"}`
  at the same rhythm, so the launcher notices silence from its side too.

While the task runs, the helper watches its state: a task held stopped (SIGSTOP, Ctrl-Z) is
reported as `{"event": "stopped"}` and `{"event": "continued"}` when it runs again, so the launcher
can call a frozen task hung without waiting for a deadline. When the task ends it reports
`{"event": "exit", "code": ..., "signal": ...}` on the event channel and exits with the task's
code (128+N for signal N).

Standard library only: it must start fast and run on hosts where only python is installed.
It must never catch a signal meant for the task, nor leave the task behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import IO

EVENT_FD_VAR = "TFLAUNCH_EVENT_FD"
MIRRORED_FILES = ("TFLAUNCH_RESULT_FILE", "TFLAUNCH_ERROR_FILE")
PING_LINE = "ping"
SIGNAL_LINE = "signal"
END_LINE = "\x1etflaunch-end"  # a task's last stdout line in a shared (Slurm step) output
STATE_POLL_S = 0.5
BEATS_PER_TIMEOUT = 4  # heartbeats (and checks) per liveness timeout

Reporter = Callable[[dict], None]


def _kill_group(signum: int) -> None:
    try:
        os.killpg(os.getpgid(0), signum)
    except ProcessLookupError:  # the group is already empty
        pass


def _signal_others(signum: int) -> None:
    """Send `signum` to every other process of our group, so the helper lives to report."""
    me, group = os.getpid(), os.getpgid(0)
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.getpgid(int(entry)) == group:
                os.kill(int(entry), signum)
        except (ProcessLookupError, PermissionError):  # gone meanwhile, or not ours
            continue


class Lifeline:
    """The launcher's end of standard input: commands, heartbeats, and the dead-man switch.

    `on_lost` runs once, before the group is killed, when the launcher is gone: end of input, or
    no line at all for `liveness_s` seconds (None: only end of input counts)."""

    def __init__(
        self,
        stream: IO[str],
        liveness_s: float | None = None,
        on_lost: Callable[[], None] = lambda: None,
        me: str | None = None,
    ):
        """`me`: this task's name on a channel shared by several helpers (a Slurm step's broadcast
        stdin), where `signal N ME` is for this helper alone and `signal N` for all."""
        self._stream = stream
        self._me = me
        self._liveness_s = liveness_s
        self._on_lost = on_lost
        self._heard = time.monotonic()
        self._lost = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()
        if self._liveness_s:
            threading.Thread(target=self._watch_silence, daemon=True).start()

    def _read(self) -> None:
        for raw in self._stream:
            self._heard = time.monotonic()
            words = raw.split()
            if len(words) == 3 and words[2] == self._me:
                words = words[:2]
            if len(words) == 2 and words[0] == SIGNAL_LINE:
                try:
                    _signal_others(int(words[1]))
                except ValueError:  # a garbled command must not kill the task
                    continue
        self._give_up()

    def _watch_silence(self) -> None:
        assert self._liveness_s is not None
        while True:
            time.sleep(min(1.0, self._liveness_s / BEATS_PER_TIMEOUT))
            if time.monotonic() - self._heard > self._liveness_s:
                self._give_up()

    def _give_up(self) -> None:
        if not self._lost.acquire(blocking=False):
            return  # the other thread is already at it
        try:
            self._on_lost()
        finally:
            _kill_group(signal.SIGKILL)


def _heartbeat(report: Reporter, period_s: float) -> None:
    while True:
        time.sleep(period_s)
        report({"event": "alive"})


def _process_state(pid: int) -> str | None:
    """The one-letter state in /proc/PID/stat ('T' is stopped); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # exited, or no /proc on this system
        return None


def _watch_state(child: subprocess.Popen, report: Reporter, done: threading.Event) -> None:
    stopped = False
    while not done.wait(STATE_POLL_S):
        now_stopped = _process_state(child.pid) == "T"
        if now_stopped != stopped:
            stopped = now_stopped
            report({"event": "stopped" if stopped else "continued", "pid": child.pid})


def _fd_reporter(fd: int | None) -> Reporter:
    def report(event: dict) -> None:
        if fd is None:
            return
        try:
            os.write(fd, (json.dumps(event) + "\n").encode())
        except OSError:  # the launcher stopped listening; the exit code still tells
            pass

    return report


def _default_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def exit_status(code: int | None, sig: int | None) -> int:
    return code if code is not None else 128 + (sig or 0)


def supervise(
    argv: list[str],
    lifeline: IO[str],
    report: Reporter,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    pass_fds: tuple[int, ...] = (),
    watch: Reporter | None = None,
    liveness_s: float | None = None,
    on_lost: Callable[[], None] = lambda: None,
    me: str | None = None,
) -> tuple[int | None, int | None]:
    """Start `argv` in our process group, wait, report its end; the lifeline kills the group.

    `watch` (default: `report`) receives the stopped/continued reports while the task runs.
    Returns (exit code, None) or (None, signal number)."""
    if os.getpgid(0) != os.getpid():
        os.setsid()  # remote start: become the leader of our own group
    # The task decides what SIGTERM/SIGINT mean; the helper must outlive it to report.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            pass_fds=pass_fds,
            close_fds=True,
            preexec_fn=_default_signals,
        )
    except OSError as error:
        message = f"cannot start {argv[0]!r}: {error.strerror}"
        print(message, flush=True)
        report({"event": "exit", "code": 127, "signal": None, "error": message})
        return 127, None
    Lifeline(lifeline, liveness_s, on_lost, me).start()
    done = threading.Event()
    threading.Thread(target=_watch_state, args=(child, watch or report, done), daemon=True).start()
    status = child.wait()
    done.set()
    _signal_others(signal.SIGKILL)  # the task is over when its whole group is; nothing may linger
    code, sig = (status, None) if status >= 0 else (None, -status)
    report({"event": "exit", "code": code, "signal": sig, "pid": child.pid})
    return code, sig


def _relay_events(read_fd: int, report: Reporter) -> None:
    with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as stream:
        for line in stream:
            try:
                report(json.loads(line))
            except ValueError:  # not a report; ignore rather than corrupt the channel
                continue


def _own_header(table: dict) -> tuple[dict, str]:
    """In a Slurm step every helper reads the same table: pick this task's entry by SLURM_PROCID,
    and map its GPU ids through the devices Slurm gave the step (they are slots, not ids)."""
    me = os.environ.get("SLURM_PROCID", "")
    entry = table["tasks"][int(me)]
    node = os.environ.get("SLURMD_NODENAME")
    if entry.get("node") and node and entry["node"] != node:
        raise SystemExit(f"tflaunch helper: task {me} was planned for node {entry['node']} but runs on {node}")
    step_gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    slots = entry["env"].get("CUDA_VISIBLE_DEVICES")
    if step_gpus and slots:
        entry["env"]["CUDA_VISIBLE_DEVICES"] = ",".join(step_gpus[int(i)] for i in slots.split(",") if i)
    return entry, me


def _slurm_step() -> str | None:
    job, step = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID")
    return f"{job}.{step}" if job and step else None


def remote_main() -> int:
    """Over SSH: header on stdin; output on stdout; events (JSON lines) on stderr. In a Slurm step
    the header is a table of every task's (see `_own_header`), and stdout ends with END_LINE."""
    header = json.loads(sys.stdin.readline())
    me = None
    if "tasks" in header:
        header, me = _own_header(header)
    lock = threading.Lock()

    def report(event: dict) -> None:
        with lock:
            try:
                sys.stderr.write(json.dumps(event) + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):  # the SSH channel is gone; the lifeline handles the rest
                pass

    scratch = tempfile.mkdtemp(prefix="tflaunch-task-")
    env = dict(os.environ)
    env.update(header["env"])
    # Result and error files are written in a private scratch dir and sent back at the end,
    # so the launcher gets them whether or not it shares a file system with this host.
    mirrors = {}
    for key in MIRRORED_FILES:
        if key in env:
            mirrors[key] = os.path.join(scratch, key.lower())
            env[key] = mirrors[key]
    read_fd, write_fd = os.pipe()
    env[EVENT_FD_VAR] = str(write_fd)
    relay = threading.Thread(target=_relay_events, args=(read_fd, report), daemon=True)
    relay.start()
    liveness_s = header.get("liveness_s")
    if liveness_s:
        threading.Thread(target=_heartbeat, args=(report, liveness_s / BEATS_PER_TIMEOUT), daemon=True).start()
    report({"event": "alive", "pid": os.getpid(), "step": _slurm_step()})
    try:
        code, sig = supervise(
            header["argv"],
            sys.stdin,
            lambda event: None,
            env=env,
            cwd=os.path.expanduser(header["cwd"]) if header.get("cwd") else None,
            pass_fds=(write_fd,),
            watch=report,
            liveness_s=liveness_s,
            on_lost=lambda: shutil.rmtree(scratch, ignore_errors=True),
            me=me,
        )
    finally:
        os.close(write_fd)
    relay.join(1.0)
    files = {}
    for key, path in mirrors.items():
        try:
            with open(path, encoding="utf-8") as handle:
                files[key] = handle.read()
        except OSError:  # the task never wrote it
            continue
    shutil.rmtree(scratch, ignore_errors=True)
    report({"event": "files", "files": files})
    if me is not None:  # the step's output is shared: say where this task's ends
        sys.stdout.write(END_LINE + "\n")
        sys.stdout.flush()
    report({"event": "exit", "code": code, "signal": sig})
    return exit_status(code, sig)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m launcher.task_runner -- COMMAND [ARGS...]", file=sys.stderr)
        raise SystemExit(2)
    fd = int(os.environ[EVENT_FD_VAR]) if os.environ.get(EVENT_FD_VAR) else None
    code, sig = supervise(args, sys.stdin, _fd_reporter(fd), pass_fds=(fd,) if fd is not None else ())
    raise SystemExit(exit_status(code, sig))


if __name__ == "__main__":
    main()
