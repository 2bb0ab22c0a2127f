"""Every thread's stack of a host's tasks, taken without stopping them (a hang named, not only timed out).

Two ways, tried in order for each task:
  - py-spy (`py-spy dump --pid P --json --native`), found on PATH or beside the agent's python: it reads
    any python process of the task's group, whatever it runs, with native frames where it can unwind them.
    The agent is the tasks' parent, so ptrace is allowed under Yama's default scope 1 once the task
    named the agent its tracer (tflaunch/stacks.py does, for the runtime and for scripts that import
    tflaunch); py-spy then runs as the agent's child.
  - faulthandler: the built-in runtime, the python trampoline and a script that imports tflaunch register
    STACK_SIGNAL at start-up (tflaunch/stacks.py) to write every thread's Python stack to the task's
    stack file (STACK_FILE_VAR, in the agent's scratch directory), whose first line is the registering pid
    and signal. The agent signals only that pid, only while it leads the task's group and still catches
    that signal (/proc/PID/status): a process that registered nothing, or re-executed itself since, would
    die of it.

A task held stopped (SIGSTOP) gets neither: the signal would wait, py-spy would block. Each way is bounded
in time; what neither gives is said (`why`). Standard library only.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from typing import Any

from launcher.agent.keeper import proc_stat
from launcher.agent.processes import which
from worker.contract import STACK_SIGNAL

PY_SPY_TIMEOUT_S = 20.0  # its native unwinding loads the symbols of TensorFlow's libraries: ~2 s a process
FAULTHANDLER_WAIT_S = 3.0  # for the signalled process to write its stacks
_SETTLED_S = 0.2  # the file stopped growing this long: the dump is whole
MOST_PROCESSES = 8  # of one task's group, leader first
ANSWER_BYTES = 768 * 1024  # of one host's answer: under the largest frame the launcher reads
MOST_THREADS = 64  # of one process
MOST_FRAMES = 128  # of one thread, innermost first


def py_spy() -> str | None:
    """py-spy on the agent's PATH, else beside its python (a virtual environment's bin, not on PATH)."""
    found = which("py-spy")
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return found or (beside if os.access(beside, os.X_OK) else None)


def group_members(pgid: int) -> list[int]:
    """The processes of a task's group, its leader first (the task's own process; then its children)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pgid:
            fields = proc_stat(entry)
            if fields is not None and len(fields) > 2 and fields[2] == str(pgid).encode():
                members.append(int(entry))
    return [pgid, *sorted(members)][:MOST_PROCESSES]


def _dump(tool: str, pid: int, native: bool) -> tuple[list[Any] | None, str]:
    argv = [tool, "dump", "--pid", str(pid), "--json", *(["--native"] if native else [])]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=PY_SPY_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"py-spy did not answer within {PY_SPY_TIMEOUT_S:g}s"
    except OSError as error:
        return None, f"cannot run py-spy: {error.strerror}"
    if done.returncode == 0:
        try:
            threads = json.loads(done.stdout)
            if isinstance(threads, list):
                return threads, ""
        except ValueError:
            pass
    said = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
    return None, f"py-spy: {said[-1] if said else f'exit code {done.returncode}'}"[:300]


def _slim(thread: Any) -> dict[str, Any]:
    """A thread of py-spy's JSON as the launcher reads it: its name and frames as [function, file, line,
    native], innermost first (a native frame's file is its library)."""
    if not isinstance(thread, dict):
        return {"name": "?", "frames": []}
    frames = []
    for frame in (thread.get("frames") or [])[:MOST_FRAMES]:
        if isinstance(frame, dict):
            native = frame.get("module") is not None
            frames.append([str(frame.get("name")), str(frame.get("filename")), frame.get("line") or 0, native])
    return {"name": str(thread.get("thread_name") or thread.get("thread_id")), "frames": frames}


def by_py_spy(tool: str, pgid: int) -> tuple[list[dict[str, Any]], str]:
    """Each python process of the group that py-spy reads: {pid, threads (py-spy's JSON)}; and why none was."""
    found, why = [], ""
    for pid in group_members(pgid):
        threads, why_not = _dump(tool, pid, native=True)
        if threads is None and "native" in why_not.lower():  # a build that cannot unwind here: Python frames
            threads, why_not = _dump(tool, pid, native=False)
        if threads is not None:
            found.append({"pid": pid, "threads": [_slim(thread) for thread in threads[:MOST_THREADS]]})
        elif pid == pgid:
            why = why_not
    return found, why


def _open_regular(path: str) -> int | None:
    """The task's stack file, opened for reading only when it is a regular file (the task may have made it a
    FIFO, which would block, or a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def registered(path: str) -> tuple[int, int] | None:
    """The pid that registered a stack signal and the signal (the file's first line: `PID SIGNAL`), or None."""
    fd = _open_regular(path)
    if fd is None:
        return None
    try:
        first = os.pread(fd, 32, 0).split(b"\n", 1)[0].split()
    finally:
        os.close(fd)
    if len(first) != 2 or not all(word.isdigit() for word in first):
        return None
    return int(first[0]), int(first[1])


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler on `signum` now (its SigCgt): one that re-executed itself, or reset
    the signal, would die of it."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def by_faulthandler(path: str, pgid: int) -> tuple[str | None, str]:
    """Signal the task's registered process and read what its faulthandler wrote; None and why when it cannot."""
    found = registered(path)
    if found is None:
        return None, "the task registered no stack signal (neither the runtime nor a script importing tflaunch)"
    pid, signum = found
    if pid != pgid:
        return None, "the process that registered the stack signal no longer leads the task"
    if signum != STACK_SIGNAL or not catches(pid, signum):  # never a signal that would end it
        return None, "the task no longer catches its stack signal (it re-executed itself, or reset the signal)"
    fd = _open_regular(path)
    if fd is None:
        return None, "its stack file is no longer a regular file"
    try:
        before = os.fstat(fd).st_size
        try:
            os.kill(pid, signum)
        except OSError as error:
            return None, f"cannot signal it: {error.strerror}"
        deadline, size, settled = time.monotonic() + FAULTHANDLER_WAIT_S, before, time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = os.fstat(fd).st_size
            if now != size:
                size, settled = now, time.monotonic()
            elif size > before and time.monotonic() - settled >= _SETTLED_S:
                break
        if size <= before:
            return None, f"it wrote no stack within {FAULTHANDLER_WAIT_S:g}s of the signal"
        return os.pread(fd, min(size - before, ANSWER_BYTES), before).decode("utf-8", "replace"), ""
    finally:
        os.close(fd)


def capture(pgid: int, stack_file: str | None, stopped: bool) -> dict[str, Any]:
    """One task's stacks: {"via": "py-spy", "processes": [...]} or {"via": "faulthandler", "text": ...},
    else {"via": None, "why": ...}."""
    if stopped:
        return {"via": None, "why": "its process is held stopped (SIGSTOP): no stack can be taken"}
    tool, why = py_spy(), "py-spy is not installed on the host"
    if tool is not None:
        processes, why = by_py_spy(tool, pgid)
        if processes:
            return {"via": "py-spy", "processes": processes}
    text, why_not = by_faulthandler(stack_file, pgid) if stack_file else (None, "no stack file")
    if text is not None:
        return {"via": "faulthandler", "pid": pgid, "text": text}
    return {"via": None, "why": f"{why}; {why_not}"}


def _within(found: dict[str, Any], budget: int) -> dict[str, Any]:
    """One task's stacks cut to `budget` bytes of JSON: native frames go first, then the innermost of each
    thread's are kept, then the text is cut."""
    if len(json.dumps(found)) <= budget:
        return found
    for process in found.get("processes", []):
        for thread in process["threads"]:
            thread["frames"] = [frame for frame in thread["frames"] if not frame[3]]
    while len(json.dumps(found)) > budget and any(
        t["frames"] for p in found.get("processes", []) for t in p["threads"]
    ):
        for process in found.get("processes", []):
            for thread in process["threads"]:
                thread["frames"] = thread["frames"][: len(thread["frames"]) // 2]
    if "text" in found:
        found["text"] = found["text"][-budget // 2 :]
    return found


def capture_all(tasks: list[tuple[int, int, str | None, bool]]) -> dict[str, Any]:
    """Every (ident, pgid, stack file, stopped) task's stacks, side by side, by ident (as a string, for JSON),
    the whole under ANSWER_BYTES."""
    found: dict[str, Any] = {}

    def one(ident: int, pgid: int, path: str | None, stopped: bool) -> None:
        try:
            found[str(ident)] = capture(pgid, path, stopped)
        except Exception as error:  # noqa: BLE001 - one task's failure must not cost the others' stacks
            found[str(ident)] = {"via": None, "why": f"{type(error).__name__}: {error}"}

    threads = [threading.Thread(target=one, args=task, daemon=True) for task in tasks]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + PY_SPY_TIMEOUT_S * 2 + FAULTHANDLER_WAIT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    budget = ANSWER_BYTES // max(1, len(tasks))
    return {ident: _within(stacks, budget) for ident, stacks in dict(found).items()}
