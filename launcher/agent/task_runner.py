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

Standby mode (warm spares): a helper started with a `standby` header (locally `--standby`, the
header on stdin) starts a spare interpreter that imports TensorFlow while the current attempt
runs (see launcher/spare.py), reports `{"event": "spare", "ready": ...}`, and waits under the
same lifeline for its task's header as the next JSON line on stdin. The task then runs in the
spare when it can (`python SCRIPT` or `python -m MODULE`, same python, same environment but for
what TensorFlow reads only when it builds a strategy); otherwise it starts cold. Either way a
`{"event": "warm", "used": ...}` report says which.

Standard library only: it must start fast and run on hosts where only python is installed.
It must never catch a signal meant for the task, nor leave the task behind.
"""

from __future__ import annotations

import json
import os
import queue
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
SPARE_EVENT = "spare"  # a standby's first report: its spare is ready, or will not be
WARM_EVENT = "warm"  # whether the task runs in the spare, and why not
# Read by TensorFlow only when a strategy or a device is first made, never at import: a spare
# may take an order whose values differ. So may the launcher's own TFLAUNCH_* variables.
LATE_KEYS = ("TF_CONFIG", "CUDA_VISIBLE_DEVICES")
LATE_PREFIX = "TFLAUNCH_"

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
        self._started = False
        self._orders: queue.Queue[dict] = queue.Queue()

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        threading.Thread(target=self._read, daemon=True).start()
        if self._liveness_s:
            threading.Thread(target=self._watch_silence, daemon=True).start()

    def next_order(self) -> dict:
        """A standby's task header: the next JSON line. Never returns if the launcher goes first."""
        self.start()
        return self._orders.get()

    def _read(self) -> None:
        for raw in self._stream:
            self._heard = time.monotonic()
            if raw.startswith("{"):
                try:
                    self._orders.put(json.loads(raw))
                except ValueError:  # a garbled header: the launcher's silence or EOF decides
                    pass
                continue
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


def spare_declines(python: str, before: dict[str, str], argv: list[str], env: dict[str, str]) -> str | None:
    """Why a spare started as `python` with environment `before` cannot run this order; None when it can."""
    if not argv or argv[0] != python:
        return f"the command does not start with the spare's python ({python})"
    if len(argv) < 2 or (argv[1] == "-m" and len(argv) < 3) or (argv[1] != "-m" and argv[1].startswith("-")):
        return "only `python SCRIPT ...` and `python -m MODULE ...` run in a spare"
    changed = sorted(
        key
        for key in set(before) | set(env)
        if key not in LATE_KEYS and not key.startswith(LATE_PREFIX) and before.get(key) != env.get(key)
    )
    if changed:
        return f"the environment changed since the spare started ({', '.join(changed[:3])})"
    return None


class Spare:
    """A standby interpreter for the next attempt, child of this helper and in its process group.

    Lifecycle: started at once; `take()` hands it the task (or refuses and kills it); used once.
    Exactly one `spare` report is sent: when it is ready, or when the order comes first."""

    def __init__(self, standby: dict, env: dict[str, str], pass_fds: tuple[int, ...], report: Reporter) -> None:
        self.standby = standby
        self._report = report
        self._told = threading.Lock()
        self._said = False
        self.ready = False
        self.error: str | None = None
        self.proc: subprocess.Popen | None = None
        self.env = {**env, **(standby.get("env") or {})}
        orders_r, self._orders = os.pipe()
        ready_r, ready_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [standby["python"], "-c", standby["bootstrap"], str(orders_r), str(ready_w)],
                stdin=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=os.path.expanduser(standby["cwd"]) if standby.get("cwd") else None,
                pass_fds=(orders_r, ready_w, *pass_fds),
                close_fds=True,
                preexec_fn=_default_signals,
            )
        except OSError as error:
            self.error = f"cannot start {standby['python']!r}: {error.strerror}"
        finally:
            os.close(orders_r)
            os.close(ready_w)
        if self.proc is not None:
            first = json.dumps(standby["source"]) + "\n" + json.dumps({"preload": standby.get("preload", [])}) + "\n"
            if not self._send(first):
                self.error = "the spare exited at once"
        threading.Thread(target=self._await_ready, args=(ready_r,), daemon=True).start()

    def _send(self, text: str) -> bool:
        try:
            os.write(self._orders, text.encode())
            return True
        except OSError:  # the spare died (a python that cannot start)
            return False

    def _await_ready(self, ready_r: int) -> None:
        with os.fdopen(ready_r, "r", encoding="utf-8", errors="replace") as stream:
            line = stream.readline()
        try:
            info = json.loads(line) if line else {}
        except ValueError:
            info = {}
        if info.get("ready"):
            self.ready = True
            self._tell({"ready": True, "import_s": info.get("import_s"), "failed": info.get("failed") or []})
        else:
            code = self.proc.poll() if self.proc is not None else None
            self._tell({"ready": False, "error": self.error or f"the spare exited before it was ready ({code})"})

    def _tell(self, info: dict) -> None:
        with self._told:
            if self._said:
                return
            self._said = True
        self._report({"event": SPARE_EVENT, **info})

    def take(self, argv: list[str], env: dict[str, str], cwd: str | None) -> subprocess.Popen | None:
        """Hand the spare its task; None (and the spare killed) when it cannot run it."""
        why = self.error or spare_declines(self.standby["python"], self.env, argv, env)
        if why is None and self.proc is not None and self.proc.poll() is not None:
            why = f"the spare exited (code {self.proc.returncode})"
        ready = self.ready
        if why is None and not self._send(json.dumps({"argv": argv, "env": env, "cwd": cwd}) + "\n"):
            why = "the spare is gone"
        os.close(self._orders)
        self._tell({"ready": False, "error": "the order came first"})
        if why is not None:
            if self.proc is not None:
                self.proc.kill()
                self.proc.wait()
            self._report({"event": WARM_EVENT, "used": False, "why": why})
            return None
        self._report({"event": WARM_EVENT, "used": True, "ready": ready})
        return self.proc


def supervise(
    argv: list[str],
    lifeline: Lifeline,
    report: Reporter,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    pass_fds: tuple[int, ...] = (),
    watch: Reporter | None = None,
    spare: Spare | None = None,
) -> tuple[int | None, int | None]:
    """Start `argv` in our process group (in the spare when it can), wait, report its end; the
    lifeline kills the group. `watch` (default: `report`) receives the stopped/continued reports
    while the task runs. Returns (exit code, None) or (None, signal number)."""
    _lead_group()
    child = spare.take(argv, dict(os.environ) if env is None else env, cwd) if spare is not None else None
    if child is None:
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
    lifeline.start()
    done = threading.Event()
    threading.Thread(target=_watch_state, args=(child, watch or report, done), daemon=True).start()
    status = child.wait()
    done.set()
    _signal_others(signal.SIGKILL)  # the task is over when its whole group is; nothing may linger
    code, sig = (status, None) if status >= 0 else (None, -status)
    report({"event": "exit", "code": code, "signal": sig, "pid": child.pid})
    return code, sig


def _lead_group() -> None:
    """Lead our own process group (a remote start is not one yet), and leave SIGTERM and SIGINT
    to the task: the helper must outlive it to report."""
    if os.getpgid(0) != os.getpid():
        os.setsid()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)


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


def _stderr_reporter() -> Reporter:
    lock = threading.Lock()

    def report(event: dict) -> None:
        with lock:
            try:
                sys.stderr.write(json.dumps(event) + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):  # the SSH channel is gone; the lifeline handles the rest
                pass

    return report


def remote_main() -> int:
    """Over SSH: header on stdin; output on stdout; events (JSON lines) on stderr. In a Slurm step
    the header is a table of every task's (see `_own_header`), and stdout ends with END_LINE.
    A `standby` header starts a spare first and waits for the task's header (module docstring)."""
    header = json.loads(sys.stdin.readline())
    me = None
    if "tasks" in header:
        header, me = _own_header(header)
    _lead_group()
    report = _stderr_reporter()
    scratch = tempfile.mkdtemp(prefix="tflaunch-task-")
    read_fd, write_fd = os.pipe()
    relay = threading.Thread(target=_relay_events, args=(read_fd, report), daemon=True)
    relay.start()
    liveness_s = header.get("liveness_s")
    lifeline = Lifeline(sys.stdin, liveness_s, lambda: shutil.rmtree(scratch, ignore_errors=True), me)
    spare = None
    if "standby" in header:
        spare = Spare(header["standby"], {**os.environ, EVENT_FD_VAR: str(write_fd)}, (write_fd,), report)
        header = lifeline.next_order()
    env = dict(os.environ)
    env.update(header["env"])
    # Result and error files are written in a private scratch dir and sent back at the end,
    # so the launcher gets them whether or not it shares a file system with this host.
    mirrors = {}
    for key in MIRRORED_FILES:
        if key in env:
            mirrors[key] = os.path.join(scratch, key.lower())
            env[key] = mirrors[key]
    env[EVENT_FD_VAR] = str(write_fd)
    if liveness_s:
        threading.Thread(target=_heartbeat, args=(report, liveness_s / BEATS_PER_TIMEOUT), daemon=True).start()
    report({"event": "alive", "pid": os.getpid(), "step": _slurm_step()})
    try:
        code, sig = supervise(
            header["argv"],
            lifeline,
            lambda event: None,
            env=env,
            cwd=os.path.expanduser(header["cwd"]) if header.get("cwd") else None,
            pass_fds=(write_fd,),
            watch=report,
            spare=spare,
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
    """Local start: `-- COMMAND ARGS...`, or `--standby` with the standby and then the task's
    header as JSON lines on stdin (the launcher set the environment but for the task's own)."""
    args = sys.argv[1:]
    fd = int(os.environ[EVENT_FD_VAR]) if os.environ.get(EVENT_FD_VAR) else None
    report = _fd_reporter(fd)
    pass_fds = (fd,) if fd is not None else ()
    lifeline = Lifeline(sys.stdin)
    if args == ["--standby"]:
        _lead_group()
        spare = Spare(json.loads(sys.stdin.readline())["standby"], dict(os.environ), pass_fds, report)
        header = lifeline.next_order()
        env = {**os.environ, **header["env"]}
        cwd = os.path.expanduser(header["cwd"]) if header.get("cwd") else None
        code, sig = supervise(header["argv"], lifeline, report, env=env, cwd=cwd, pass_fds=pass_fds, spare=spare)
        raise SystemExit(exit_status(code, sig))
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m launcher.agent.task_runner -- COMMAND [ARGS...] | --standby", file=sys.stderr)
        raise SystemExit(2)
    code, sig = supervise(args, lifeline, report, pass_fds=pass_fds)
    raise SystemExit(exit_status(code, sig))


if __name__ == "__main__":
    main()
