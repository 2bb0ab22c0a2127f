"""Open agents on Slurm nodes: one job step, one agent per node, for the whole launch.

`srun --input=all` gives every agent of the step the same input: the agent line once, then the
commands, each addressed to one agent by its SLURM_PROCID (`"to": RANK`, see launcher/agent/
main.py). `SLURM_HOSTFILE` with `--distribution=arbitrary` puts rank i on the i-th node asked
for, and `--label` prefixes every output line with its rank, so one reader splits the step's
output back into a channel per node. Restarts reuse the agents (no new step); a node lost
mid-run gets a fresh agent in a step of its own (`--overlap`). The launcher stays the supervisor:
it decides, Slurm only carries.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import re
import subprocess
import threading
from collections import deque

from launcher.agent import frames
from launcher.agent.bootstrap import agent_argv
from launcher.common.errors import HostError
from launcher.common.private_files import make_private_dir, open_private
from launcher.transport.channel import end_by_input
from launcher.transport.session import Channel

log = logging.getLogger(__name__)
_LABEL = re.compile(rb"^ *(\d+): ")
_CLOSE_WAIT_S = 10.0


class _Feed:
    """Byte lines for one agent's session, fed by the step's reader (`readline(limit)`)."""

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


class _Step:
    """One `srun` running an agent on each of its nodes, and the splitting of its output."""

    def __init__(self, argv: list[str], env: dict[str, str], count: int, srun_log: str) -> None:
        self.feeds = [_Feed() for _ in range(count)]
        self.said: deque[str] = deque(maxlen=5)  # srun's own last lines, for messages
        self._srun_log = srun_log
        self._lock = threading.Lock()
        self._broadcast: set[bytes] = set()
        self._open = count
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
            )
        except OSError as error:
            raise HostError("slurm", f"cannot run srun ({error.strerror}); is Slurm installed here?") from None
        threading.Thread(target=self._split, daemon=True, name="srun-out").start()

    def broadcast_once(self, data: bytes) -> None:
        """Send `data` to every agent of the step, unless it already was."""
        with self._lock:
            if data in self._broadcast:
                return
            self._broadcast.add(data)
        self.write(data)

    def write(self, data: bytes) -> None:
        with self._lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def _split(self) -> None:
        """Route each labelled line to its agent; a long line's later pieces follow its first."""
        assert self.proc.stdout is not None
        current: int | None = None
        with open_private(self._srun_log, "ab") as srun_log:
            for chunk in iter(functools.partial(self.proc.stdout.readline, frames.MAX_FRAME_BYTES), b""):
                match = _LABEL.match(chunk) if current is None else None
                if match is not None and int(match.group(1)) < len(self.feeds):
                    current, chunk = int(match.group(1)), chunk[match.end() :]
                if current is None:  # srun's own words ("srun: error: ...")
                    srun_log.write(chunk)
                    srun_log.flush()
                    self.said.append(chunk.decode("utf-8", "replace").strip())
                    continue
                self.feeds[current].put(chunk)
                if chunk.endswith(b"\n"):
                    current = None
        self.proc.wait()
        for feed in self.feeds:
            feed.end()

    def ended(self) -> str | None:
        if self.proc.poll() is None:
            return None
        said = "; ".join(s for s in self.said if s)
        return f"the srun step ended (exit {self.proc.returncode})" + (f": {said}" if said else "")

    def release(self) -> None:
        """One agent's channel closed; when all are, close the shared input and let srun end."""
        with self._lock:
            self._open -= 1
            last = self._open == 0
        if not last:
            return
        end_by_input(self.proc, _CLOSE_WAIT_S)  # agents that never leave: srun's own kill ends the step


class SlurmMedium:
    """Agents on the allocation's nodes (`nodes[i]` is the node of host i), in job steps."""

    def __init__(self, nodes: list[str], pythons: list[str], srun_options: list[str], run_dir: str) -> None:
        self._nodes = nodes
        self._pythons = pythons
        self._srun_options = srun_options
        self._run_dir = run_dir
        self._steps: list[_Step] = []
        self._count = 0

    def open(self, indices: list[int], first_line: bytes) -> dict[int, Channel | HostError]:
        opened: dict[int, Channel | HostError] = {}
        by_python: dict[str, list[int]] = {}
        for index in indices:
            by_python.setdefault(self._pythons[index], []).append(index)
        for python, group in by_python.items():
            try:
                opened.update(self._step(python, group, first_line))
            except HostError as error:
                opened.update({index: HostError(self._nodes[index], error.cause) for index in group})
        return opened

    def _step(self, python: str, indices: list[int], first_line: bytes) -> dict[int, Channel | HostError]:
        make_private_dir(self._run_dir)
        self._count += 1
        hostfile = os.path.join(self._run_dir, f"slurm-hostfile-{self._count}")
        with open_private(hostfile, "w") as handle:
            handle.write("".join(f"{self._nodes[i]}\n" for i in indices))
        used = sorted({self._nodes[i] for i in indices})
        argv = [
            "srun",
            f"--job-name=tflaunch-{os.path.basename(self._run_dir)}",
            f"--nodes={len(used)}",
            f"--ntasks={len(indices)}",
            f"--nodelist={','.join(used)}",
            "--distribution=arbitrary",
            "--overlap",
            "--overcommit",
            "--label",
            "--input=all",
            "--kill-on-bad-exit=0",
            *self._srun_options,
            *agent_argv(python),
        ]
        step = _Step(argv, {**os.environ, "SLURM_HOSTFILE": hostfile}, len(indices), f"{self._run_dir}/srun.log")
        self._steps.append(step)
        try:
            step.write(first_line)
        except OSError:  # srun already ended (a node it cannot reach): each channel's end says why
            pass
        return {index: self._channel(step, rank) for rank, index in enumerate(indices)}

    @staticmethod
    def _channel(step: _Step, rank: int) -> Channel:
        prefix = b'{"to": %d, ' % rank
        released = threading.Event()

        def write(data: bytes) -> None:
            step.write(prefix + data[1:])  # every command is a JSON object: address it to this agent

        def close() -> None:
            if released.is_set():
                return
            released.set()
            try:
                write(b'{"op": "bye"}\n')
            except (OSError, ValueError):  # srun is gone already
                pass
            step.release()

        return Channel(write, step.feeds[rank], close, step.ended, shared=step.broadcast_once)

    def lost(self, index: int) -> None:
        """Nothing to drop: the next open starts a step of its own on that node."""

    def close(self) -> None:
        for step in self._steps:
            if step.proc.poll() is None:
                try:
                    step.proc.wait(timeout=_CLOSE_WAIT_S)
                except subprocess.TimeoutExpired:  # its agents never left: end the step
                    step.proc.kill()
                    step.proc.wait()
