"""A warm spare forked from the built-in runtime right after it imported TensorFlow.

A spare that imports TensorFlow itself costs the busy workers of its host a few percent of their
steps while it imports (memory traffic and caches, which CPU priority does not govern), and half a
gigabyte of its own. Forked from a task that has just imported it, a spare costs about 10 ms and
shares the import's memory until either writes it.

The host's agent asks for one by handing the task four pipe ends (`SPARE_FDS_VAR`: orders to read,
ready to write, output and events to write). `fork_after_import` then reports `starting`, imports
TensorFlow and the runtime's own modules (what the task imports next in any case: the spare gets
them for nothing) and forks twice; the middle process exits at once and is reaped, so the spare is
orphaned straight away and adopted by the agent (a child subreaper), whose child it is from then
on. The task goes on as if nothing happened. The spare takes a process group of its own, moves its
output onto its pipe, says its pid and that it is ready (the agent adopts it: an order may come
from then on) and waits for its one order: the next attempt's environment and working directory.
It spends no CPU from its fork to its order: an import there (tried, after a wait of 3 s) took a
fifth of a second per spare from the workers' steady training on a 2-core host. It acknowledges its
order, and runs `python -m worker` again as that task (which forks no spare: no pipes can be handed
to a running process). The end of the orders pipe without an order (the agent is gone, or dropped
it) ends it.

It must never build a TF op or touch a device before its order, nor has it: the fork comes before
the runtime reads TF_CONFIG, and TensorFlow starts no runtime at import. The import leaves one idle
native thread behind; the fork copies only the forking thread, and the spare builds everything it
uses after its order (tried: two spares forked so built the strategy and trained together). Standard library only
besides TensorFlow itself.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import sys
import time
import warnings

from worker.contract import EVENT_FD_VAR, SPARE_FDS_VAR, STARTING

ADOPTION_WAIT_S = 5.0
RUNTIME_PRELOAD = ("worker.runtime", "worker.loop")  # what the built-in task imports next: before the fork


def fork_after_import() -> None:
    """When the agent asked for a spare (SPARE_FDS_VAR): import TensorFlow and fork one. Returns in the
    task; never in the spare, which ends as the task it becomes (or at once, without an order)."""
    given = os.environ.pop(SPARE_FDS_VAR, "")  # the task's own children never see it
    try:
        orders, ready, out, events = (int(fd) for fd in given.split(","))
    except ValueError:  # not asked for (or garbled): the task runs as ever
        return
    from tflaunch.events import report  # a forked spare only: a task started the plain way never loads it here

    report(STARTING)  # the runtime is up before the import, as the runtime says it without a spare
    import tensorflow  # noqa: F401 - what the spare shares

    _preload()
    sys.stdout.flush()  # nothing the task printed may be left in a buffer the spare would inherit
    sys.stderr.flush()
    with warnings.catch_warnings():  # Python 3.12+ warns of a fork with threads; the import's is idle (see above)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            middle = os.fork()
        except OSError:  # no memory or no process left for a copy: the task runs on without a spare
            middle = -1
        if middle == 0:
            try:
                spare = os.fork()
            except OSError:
                os._exit(0)  # no spare: its pipes end, and the agent hears none is coming
            if spare != 0:
                os._exit(0)  # the spare's parent: gone at once, so the agent adopts the spare
    if middle == 0:
        _serve(orders, ready, out, events)  # returns only as the task it became ends: by SystemExit
        os._exit(0)
    if middle > 0:
        os.waitpid(middle, 0)
    for fd in (orders, ready, out, events):
        os.close(fd)


def _serve(orders: int, ready: int, out: int, events: int) -> None:
    os.setpgid(0, 0)  # its own group: stopping the task's group leaves it standing by
    middle, given_up = os.getppid(), time.monotonic() + ADOPTION_WAIT_S
    while os.getppid() == middle and time.monotonic() < given_up:  # the agent's child once its parent left
        time.sleep(0.001)
    os.dup2(out, 1)
    os.dup2(out, 2)
    keep = {0, 1, 2, orders, ready, events}
    for fd in _open_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:  # closed meanwhile (the listing's own descriptor)
                pass
    gc.freeze()  # its heap out of the collector's way, without a collection: that would copy every page it shares
    _say(ready, {"ready": True, "import_s": 0.0, "failed": [], "pid": os.getpid(), "forked": True})
    with os.fdopen(orders, "r", encoding="utf-8") as stream:
        line = stream.readline()
    if not line:  # the agent is gone, or it dropped this spare
        os._exit(0)
    order = json.loads(line)
    _say(ready, {"took": True})
    os.close(ready)
    os.environ.clear()
    os.environ.update({**order["env"], EVENT_FD_VAR: str(events)})
    if order.get("cwd"):
        os.chdir(os.path.expanduser(order["cwd"]))
    sys.argv = ["-m"]  # as `python -m worker` starts; run_module puts the module's file in argv[0]
    runpy.run_module("worker", run_name="__main__", alter_sys=True)


def _preload() -> None:
    """The runtime's own modules, in the task before its fork: the task imports them next all the same."""
    for name in RUNTIME_PRELOAD:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - the task imports it again, and says what is wrong
            pass


def _say(fd: int, message: dict[str, object]) -> None:
    try:
        os.write(fd, (json.dumps(message) + "\n").encode())
    except OSError:  # the agent is gone; the orders pipe says so too
        pass


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: the usual range
        return list(range(3, 256))
