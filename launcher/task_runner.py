"""The helper that owns one task's process group and dies with its launcher.

Started by a transport as `python -m launcher.task_runner -- CMD ARGS...` (locally) or fed to a
remote python over SSH. It is the leader of the task's process group, starts the task in that
group and waits for it. Its standard input is the lifeline to the launcher:

- a line `signal N` sends signal N to the whole group (how remote stops are forwarded);
- end of input (the launcher or the SSH channel is gone) kills the whole group with SIGKILL,
  so no task outlives its launcher (a dead-man switch).

When the task ends it reports `{"event": "exit", "code": ..., "signal": ...}` on the event
channel and exits with the task's code (128+N for signal N).

Standard library only: it must start fast and run on hosts where only python is installed.
It must never catch a signal meant for the task, nor leave the task behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

EVENT_FD_VAR = "TFLAUNCH_EVENT_FD"


def _kill_group(signum: int) -> None:
    try:
        os.killpg(os.getpgid(0), signum)
    except ProcessLookupError:  # the group is already empty
        pass


def _watch_lifeline(stream: object) -> None:
    for raw in stream:  # type: ignore[attr-defined]
        line = raw.strip()
        if line.startswith("signal "):
            try:
                _kill_group(int(line.split()[1]))
            except ValueError:  # a garbled command must not kill the task
                continue
    _kill_group(signal.SIGKILL)


def _report(event: dict[str, object]) -> None:
    fd = os.environ.get(EVENT_FD_VAR)
    if fd is None:
        return
    try:
        os.write(int(fd), (json.dumps(event) + "\n").encode())
    except OSError:  # the launcher stopped listening; the exit code still tells
        pass


def run(argv: list[str]) -> int:
    if os.getpgid(0) != os.getpid():
        os.setsid()  # remote start: become the leader of our own group
    # The task decides what SIGTERM/SIGINT mean; the helper must outlive it to report.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, close_fds=False, restore_signals=True,
                                 preexec_fn=_default_signals)
    except OSError as error:
        print(f"cannot start {argv[0]!r}: {error.strerror}", file=sys.stderr, flush=True)
        _report({"event": "exit", "code": 127, "signal": None, "error": f"cannot start {argv[0]!r}: {error.strerror}"})
        return 127
    threading.Thread(target=_watch_lifeline, args=(sys.stdin,), daemon=True).start()
    status = child.wait()
    code, sig = (status, None) if status >= 0 else (None, -status)
    _report({"event": "exit", "code": code, "signal": sig, "pid": child.pid})
    return code if code is not None else 128 + (sig or 0)


def _default_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m launcher.task_runner -- COMMAND [ARGS...]", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(run(args))


if __name__ == "__main__":
    main()
