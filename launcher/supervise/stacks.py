"""Tasks' stacks as the agents took them (launcher/agent/stacks.py): read, written out, and the laggard named.

A gang in a collective waits for its slowest member: every task but one blocks in TensorFlow (the
all-reduce), and the one that does not is where the hang is (a data loader blocked on NFS, a deadlock
in user code). So the laggard is the task whose main thread is not in TensorFlow, named with the innermost
frame of the user's code; where every task is in TensorFlow (or no stack could be taken), the task
furthest behind (lowest step, then quiet longest). Pure: the caller takes the stacks and writes the files.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any

from launcher.common.printable import printable
from launcher.supervise.gang import TaskStatus

_FAULTHANDLER_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python\d+\.\d+/|^<frozen |^<string>$")
_TENSORFLOW = re.compile(r"/(site|dist)-packages/(tensorflow|keras|tf_keras|tensorboard)/")
STACK_SUFFIX = ".stack.txt"


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int
    native: bool = False

    @property
    def library(self) -> bool:
        return self.native or bool(_LIBRARY.search(self.file))

    @property
    def tensorflow(self) -> bool:
        return bool(_TENSORFLOW.search(self.file))

    def short(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} {self.function}"


@dataclass(frozen=True)
class Thread:
    name: str
    pid: int | None
    frames: tuple[Frame, ...]  # innermost first

    @property
    def main(self) -> bool:
        return self.name == "MainThread" or any(f.function == "<module>" for f in self.frames)

    @property
    def python_frames(self) -> tuple[Frame, ...]:
        return tuple(f for f in self.frames if not f.native)


@dataclass(frozen=True)
class TaskStacks:
    """One task's stacks: by which way (py-spy, faulthandler), or why there are none."""

    task: str
    via: str | None
    threads: tuple[Thread, ...] = ()
    why: str = ""
    text: str = ""  # what faulthandler wrote, as it wrote it

    @property
    def main(self) -> Thread | None:
        return next((t for t in self.threads if t.main), self.threads[0] if self.threads else None)

    def waits_in_tensorflow(self) -> bool:
        """Whether its main thread's innermost Python frame is TensorFlow's (an op or collective)."""
        main = self.main
        frames = main.python_frames if main is not None else ()
        return bool(frames) and frames[0].tensorflow

    def user_frame(self) -> Frame | None:
        """The innermost frame of the main thread outside every library: the user's code (or the runtime's)."""
        main = self.main
        return next((f for f in main.python_frames if not f.library), None) if main is not None else None


def parse(task: str, taken: dict[str, Any]) -> TaskStacks:
    """An agent's answer for one task (never trusted: a field of the wrong type is left out)."""
    via = taken.get("via") if isinstance(taken.get("via"), str) else None
    if via == "faulthandler":
        text = str(taken.get("text", ""))
        return TaskStacks(task, via, _faulthandler_threads(text, taken.get("pid")), text=text)
    if via == "py-spy":
        threads = []
        for process in taken.get("processes") or []:
            if not isinstance(process, dict):
                continue
            pid = process.get("pid") if isinstance(process.get("pid"), int) else None
            for thread in process.get("threads") or []:
                if isinstance(thread, dict):
                    frames = tuple(_frame(raw) for raw in thread.get("frames") or [] if isinstance(raw, list))
                    threads.append(Thread(str(thread.get("name")), pid, frames))
        return TaskStacks(task, via, tuple(threads))
    return TaskStacks(task, None, why=str(taken.get("why") or "no stack was taken"))


def _frame(raw: list[Any]) -> Frame:
    function, file, line, native = (raw + ["?", "?", 0, False])[:4]
    line = line if isinstance(line, int) else 0
    return Frame(str(function), str(file), line, native is True or line <= 0)  # no line: an address py-spy left


def _faulthandler_threads(text: str, pid: object) -> tuple[Thread, ...]:
    threads: list[Thread] = []
    name, frames = "", list[Frame]()
    for line in text.splitlines():
        head = _FAULTHANDLER_THREAD.match(line)
        frame = _FAULTHANDLER_FRAME.match(line)
        if head:
            if name:
                threads.append(Thread(name, pid if isinstance(pid, int) else None, tuple(frames)))
            name, frames = head.group(2), []
        elif frame and name:
            frames.append(Frame(frame.group(3), frame.group(1), int(frame.group(2))))
    if name:
        threads.append(Thread(name, pid if isinstance(pid, int) else None, tuple(frames)))
    return tuple(threads)


def render(stacks: TaskStacks, host: str, at: float) -> str:
    """The text of a task's stack file: nothing in it acts on a terminal it is shown on (a thread's name, a
    function's or what a task wrote to its stack file may hold escape sequences)."""
    return "\n".join(printable(line) for line in _render(stacks, host, at).split("\n"))


def _render(stacks: TaskStacks, host: str, at: float) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(at))
    if stacks.via is None:
        return f"{stacks.task} on {host}: no stack taken at {when}: {stacks.why}\n"
    lines = [f"{stacks.task} on {host}: every thread's stack, taken by {stacks.via} at {when} (innermost first)", ""]
    if stacks.via == "faulthandler":
        return "\n".join(lines) + stacks.text.rstrip("\n") + "\n"
    for thread in stacks.threads:
        lines.append(f'Thread "{thread.name}" (pid {thread.pid}):')
        for frame in thread.frames:
            where = f"{frame.file}" if frame.native else f"{frame.file}:{frame.line}"
            lines.append(f"    {frame.function} ({where})")
        lines.append("")
    return "\n".join(lines)


def stack_path(log_path: str) -> str:
    """Beside the task's log: worker-1.log -> worker-1.stack.txt."""
    stem = log_path[: -len(".log")] if log_path.endswith(".log") else log_path
    return stem + STACK_SUFFIX


def _ago(task: TaskStatus, now: float) -> str:
    return f"{max(0.0, now - task.last_progress):.0f} s"


def _at(task: TaskStatus, now: float) -> str:
    if task.step is not None:
        return f"at step {task.step} since {_ago(task, now)}"
    if task.joined:
        return f"before its first step (nothing for {_ago(task, now)})"
    said = f"last reported {task.milestone!r}" if task.milestone else "reported nothing"
    return f"not joined ({said}, {_ago(task, now)} ago)"


STEPPING_S = 2.0  # steps are reported at most every half second: tasks a report or two apart are all stepping


def _stepping(statuses: list[TaskStatus], now: float) -> bool:
    return bool(statuses) and all(
        t.joined and t.step is not None and t.stopped_since is None and now - t.last_progress <= STEPPING_S
        for t in statuses
    )


def none_behind(statuses: list[TaskStatus]) -> str:
    """What `launch stacks` says when no task is behind."""
    steps = ", ".join(f"{t.name} at step {t.step}" for t in statuses[:4]) + (" ..." if len(statuses) > 4 else "")
    return f"none: every task reported a step in the last {STEPPING_S:g} s ({steps})"


def laggards(statuses: list[TaskStatus], stacks: dict[str, TaskStacks], now: float | None = None) -> list[TaskStatus]:
    """The tasks behind: one held stopped (SIGSTOP) first; in start-up, those that got least far (the others
    wait for them, as the start-up deadline judges); in training, those whose main thread is not in TensorFlow
    while others' are; else the furthest behind (lowest step, then quiet longest), unless (given `now`) every
    task reported a step in the last STEPPING_S."""
    if not statuses:
        return []
    held = [t for t in statuses if t.stopped_since is not None]
    if held:
        return held
    unjoined = [t for t in statuses if not t.joined]
    if unjoined:
        least = min(t.start_rank for t in unjoined)
        return [t for t in unjoined if t.start_rank == least]
    taken = [t for t in statuses if t.name in stacks and stacks[t.name].threads]
    outside = [t for t in taken if not stacks[t.name].waits_in_tensorflow()]
    if outside and len(outside) < len(statuses):
        return outside
    if now is not None and _stepping(statuses, now):
        return []  # the lowest step only trails by its last report: no one is behind
    lowest = min((t.step if t.step is not None else -1) for t in statuses)
    behind = [t for t in statuses if (t.step if t.step is not None else -1) == lowest]
    return [min(behind, key=lambda t: t.last_progress)]


def name_the_hang(statuses: list[TaskStatus], stacks: dict[str, TaskStacks], now: float) -> str:
    """ "worker:1 at step 4 since 95 s, in data.py:6 read_shard; the others wait in TensorFlow: worker:0 at
    step 4 (train.py:16 <module>)"."""
    behind = laggards(statuses, stacks, now)
    if not behind:
        return ""
    parts = []
    for task in behind:
        frame = stacks[task.name].user_frame() if task.name in stacks else None
        where = f", in {frame.short()}" if frame is not None else ""
        where = ", held stopped (SIGSTOP)" if task.stopped_since is not None else where
        parts.append(f"{task.name} {_at(task, now)}{where}")
    others = [t for t in statuses if t not in behind]
    waiting = [t for t in others if t.name in stacks and stacks[t.name].waits_in_tensorflow()]
    text = "; ".join(parts)
    if waiting:
        shown = ", ".join(f"{t.name} at step {t.step}" if t.step is not None else t.name for t in waiting[:4])
        more = f" and {len(waiting) - 4} more" if len(waiting) > 4 else ""
        text += f"; the others wait in TensorFlow (a collective): {shown}{more}"
    elif others:
        text += "; " + ", ".join(f"{t.name} {_at(t, now)}" for t in others[:4])
    return text
