"""Warm spares on a host: a standby is a spare interpreter started for a task of the next attempt while
the current one runs (launcher/agent/spare.py), or forked by the runtime itself (a forked spare).
The next start of that task hands it the order when the spare is ready and can run the command; the
spare must acknowledge the order before the agent counts the task as started in it. Otherwise it is
killed and the task starts cold; a `warm` event says which, and why. Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from typing import Any

from launcher.agent import frames
from launcher.agent.adoption import Adopted
from launcher.agent.keeper import Keeper
from launcher.agent.processes import Send, close_fds, exit_code_unreaped, kill_group
from launcher.agent.spawn import start_task
from worker.contract import (
    ENV_PREFIX,
    EVENT_FD_VAR,
    WARM,
)

TAKE_TIMEOUT_S = 5.0  # a ready spare acknowledges an order at once; longer means it is gone


SPARE = "spare"  # a standby's one report: its spare is ready, or will not be


# Read by TensorFlow only when a strategy or a device is first made, never at import: a spare
# may take an order whose values differ. So may the launcher's own TFLAUNCH_* variables.
LATE_KEYS = ("TF_CONFIG", "CUDA_VISIBLE_DEVICES")


def spare_declines(python: str, before: dict[str, str], argv: list[str], env: dict[str, str]) -> str | None:
    """Why a spare started as `python` with environment `before` cannot run this order; None when it can."""
    if not argv or argv[0] != python:
        return f"the command does not start with the spare's python ({python})"
    args = argv[2:] if argv[1:2] == ["-P"] and argv[2:3] == ["-m"] else argv[1:]
    if not args or (args[0] == "-m" and len(args) < 2) or (args[0] != "-m" and args[0].startswith("-")):
        return "only `python SCRIPT ...`, `python -m MODULE ...` and `python -P -m MODULE ...` run in a spare"
    changed = sorted(
        key
        for key in set(before) | set(env)
        if key not in LATE_KEYS and not key.startswith(ENV_PREFIX) and before.get(key) != env.get(key)
    )
    if changed:
        return f"the environment changed since the spare started ({', '.join(changed[:3])})"
    return None


class Standby:
    """A spare interpreter for one task of the next attempt (module docstring). Used once, or closed."""

    forked = False  # one that imports; a ForkedSpare was forked by its task
    error: str | None
    proc: Any  # a Popen, or an Adopted for a forked spare once it said its pid
    env: dict[str, str]

    def __init__(
        self,
        ident: int,
        order: dict[str, Any],
        env: dict[str, str],
        cwd: str | None,
        send: Send,
        keeper: Keeper | None = None,
    ) -> None:
        out_w, ev_w, orders_r, ready_r, ready_w = self._pipes(ident, str(order["python"]), env, send, keeper)
        try:
            self.proc = start_task(
                [self.python, "-c", order["bootstrap"], str(orders_r), str(ready_w)],
                self.env,
                cwd,
                out_w,
                (orders_r, ready_w, ev_w),
                keeper,
            )
        except OSError as error:
            self.error = f"cannot start {self.python!r}: {error.strerror}"
        finally:
            close_fds(orders_r, ready_w, out_w, ev_w)
        if self.proc is not None:
            first = json.dumps(order["source"]) + "\n" + json.dumps({"preload": order.get("preload", [])}) + "\n"
            if not self._write(first):
                self.error = "the spare exited at once"
        threading.Thread(target=self._listen, args=(ready_r,), daemon=True, name=f"spare-{ident}").start()

    def _pipes(
        self, ident: int, python: str, env: dict[str, str], send: Send, keeper: Keeper | None
    ) -> tuple[int, int, int, int, int]:
        """The state every spare starts with, and its pipes: sets the ends the agent keeps (output,
        events, orders) and returns (output's write end, events' write end, orders' read end, ready's
        read end, ready's write end). The spare keeps the event pipe at its write end's number."""
        self.ident = ident
        self._keeper = keeper
        self.python = python
        self.error = None
        self.ready = False
        self.took = threading.Event()
        self._send = send
        self._told = False
        self._lock = threading.Lock()
        self.proc = None
        self.out_fd, out_w = os.pipe()
        self.ev_fd, ev_w = os.pipe()
        orders_r, self._orders = os.pipe()
        ready_r, ready_w = os.pipe()
        self.env = {**env, EVENT_FD_VAR: str(ev_w)}
        return out_w, ev_w, orders_r, ready_r, ready_w

    def _write(self, text: str) -> bool:
        try:
            os.write(self._orders, text.encode())
            return True
        except OSError:  # the spare died (a python that cannot start)
            return False

    def _listen(self, ready_r: int) -> None:
        with os.fdopen(ready_r, "r", encoding="utf-8", errors="replace") as stream:
            for line in stream:
                try:
                    said = json.loads(line)
                except ValueError:
                    continue
                if said.get("took"):
                    self.took.set()
                elif said.get("ready"):
                    self._heard_ready(said)
        self._tell({"ready": False, "error": self._silent()})

    def _heard_ready(self, said: dict[str, Any]) -> None:
        self.ready = True
        self._tell({"ready": True, "import_s": said.get("import_s"), "failed": said.get("failed") or []})

    def _silent(self) -> str:
        """Why the spare's ready pipe ended (it has nothing more to say)."""
        code = exit_code_unreaped(self.proc) if self.proc is not None else None
        ended = f" ({code})" if code is not None else ""
        return self.error or f"the spare exited before it was ready{ended}"

    def _tell(self, info: dict[str, Any]) -> None:
        with self._lock:
            if self._told:
                return
            self._told = True
        self._send(frames.event_frame(self.ident, {"event": SPARE, **info}))

    def take(self, argv: list[str], env: dict[str, str], cwd: str | None) -> bool:
        """Hand the spare its task. False (and the spare killed) when it cannot or did not take it;
        either way a `warm` event says so."""
        why = self.error or spare_declines(self.python, self.env, argv, env)
        code = exit_code_unreaped(self.proc) if why is None and self.proc is not None else None
        if code is not None:
            why = f"the spare exited (code {code})"
        if why is None:
            order = {"argv": argv, "env": {**env, EVENT_FD_VAR: self.env[EVENT_FD_VAR]}, "cwd": cwd}
            if not self._write(json.dumps(order) + "\n"):
                why = "the spare is gone"
            elif not self.took.wait(TAKE_TIMEOUT_S):
                why = f"the spare did not take the order within {TAKE_TIMEOUT_S:g}s"
        close_fds(self._orders)
        self._tell({"ready": False, "error": "the order came first"})
        if why is not None:
            self.close()
            self._send(frames.event_frame(self.ident, {"event": WARM, "used": False, "why": why}))
            return False
        used = {"event": WARM, "used": True, "ready": self.ready}
        self._send(frames.event_frame(self.ident, {**used, "forked": True} if self.forked else used))
        return True

    def close(self) -> None:
        """Kill the spare's group and release everything (a standby not taken)."""
        close_fds(self._orders)
        if self.proc is not None:
            kill_group(self.proc.pid)
            if self._keeper is not None:
                self._keeper.forget(self.proc.pid)
            self.proc.wait()
        close_fds(self.out_fd, self.ev_fd)


def _unsent(frame: bytes) -> None:
    """Where a forked spare's words go before a standby adopted it: nowhere."""


class ForkedSpare(Standby):
    """A spare a runtime task forks right after its TensorFlow import (worker/forked_spare.py), on the
    pipes made here at the task's start; the agent adopts it (a child subreaper). It serves a standby
    asked for that task's next attempt (`adopt`) as an imported spare would, for less: no import."""

    forked = True
    _READY = {"ready": True, "import_s": 0.0, "failed": [], "forked": True}

    def __init__(self, python: str, env: dict[str, str], keeper: Keeper | None) -> None:
        # ident 0 and nothing said until a standby adopts it; the task (and so the spare) takes the ends
        self._out_w, self._ev_w, self._orders_r, self._ready_r, self._ready_w = self._pipes(
            0, python, env, _unsent, keeper
        )
        self._said_ready = threading.Event()  # it said its pid (adopted), or why it will not
        self._closed = False  # closed (not taken): a spare that says ready after that is killed

    def handed(self) -> tuple[tuple[int, ...], str]:
        """The pipe ends the task takes (pass_fds), and what SPARE_FDS_VAR says of them."""
        ends = (self._orders_r, self._ready_w, self._out_w, self._ev_w)
        return ends, ",".join(str(fd) for fd in ends)

    def started(self, task_started: bool) -> None:
        """The task got its ends (or did not start): close ours of them, and hear what the spare says."""
        close_fds(self._orders_r, self._ready_w, self._out_w, self._ev_w)
        if not task_started:
            self.error = "its task did not start"
            close_fds(self._ready_r)
            return
        threading.Thread(target=self._listen, args=(self._ready_r,), daemon=True, name="forked-spare").start()

    def _heard_pid(self, said: dict[str, Any]) -> None:
        """Adopt it: an order may be handed to it from now on (worker/forked_spare.py)."""
        if self.proc is not None or not isinstance(said.get("pid"), int) or said["pid"] <= 0:
            return
        if self._closed:  # closed before it said so: it must not outlive that
            kill_group(said["pid"])
            try:
                Adopted(said["pid"]).wait(timeout=TAKE_TIMEOUT_S)
            except subprocess.TimeoutExpired:  # stuck in the kernel: nothing more to be done from here
                pass
            return
        self.proc = Adopted(said["pid"])
        if self._keeper is None or not self._keeper.watch(said["pid"]):
            # once it is a task, only the keeper would kill it with a killed agent: without one, not used
            self.error = "no keeper covers it should the agent be killed"
            self._said_ready.set()
            self._tell({"ready": False, "error": self.error})
            return
        self._said_ready.set()

    def _heard_ready(self, said: dict[str, Any]) -> None:
        self._heard_pid(said)  # a forked spare says its pid and that it is ready in one word
        if self.proc is None or self.error is not None:
            return
        self.ready = True
        self._tell(self._READY)

    def close(self) -> None:
        self._closed = True
        super().close()

    def _silent(self) -> str:
        self.error = self.error or ("the spare exited" if self.ready else "the task forked no spare")
        self._said_ready.set()
        return self.error

    def adopt(self, ident: int, send: Send) -> None:
        """Serve the standby `ident` (the task's next attempt): says ready once the spare has."""
        with self._lock:
            self.ident, self._send = ident, send
        if self.error is not None:
            self._tell({"ready": False, "error": self.error})
        elif self.ready:
            self._tell(self._READY)

    def serve(self, ident: int, send: Send) -> None:
        """Serve the task `ident` itself, no standby having been asked for: it says only whether it took it."""
        with self._lock:
            self.ident, self._send, self._told = ident, send, True

    def _tell(self, info: dict[str, Any]) -> None:
        if self._send is _unsent:  # no standby asked for it yet: said when one does (adopt)
            return
        super()._tell(info)

    def take(self, argv: list[str], env: dict[str, str], cwd: str | None) -> bool:
        if self.proc is None and self.error is None:
            self._said_ready.wait(TAKE_TIMEOUT_S)  # forked at the task's import: adopted long since, as a rule
        if self.proc is None and self.error is None:
            self.error = "the forked spare was not ready"
        return super().take(argv, env, cwd)
