"""Warm spares, the launcher's side: one standby helper per task, waiting for the next attempt.

While an attempt runs, the supervisor asks its transport to prepare standbys. A standby is a
helper session like a task's, sent a `standby` header instead of a task's: its helper starts a
spare interpreter that imports TensorFlow (launcher/agent/spare.py), reports once whether the spare is
ready, and waits under the usual lifeline. The next attempt's start takes the standby made for
the same task on the same host and sends it the task's header; the helper runs the task in the
spare, or cold when the spare cannot take it. A standby not taken is closed: its helper reads
EOF and kills its group, spare included. Standbys never outlive the attempt they were made in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from launcher.agent import spare
from launcher.agent.task_runner import LATE_KEYS, SPARE_EVENT
from launcher.plan import TaskLaunch
from launcher.transport.base import parse_report

log = logging.getLogger(__name__)

WATCH_FINISH_S = 5.0  # a helper answers an order at once; longer means it is gone
_SOURCE = Path(str(spare.__file__)).read_text(encoding="utf-8")


def standby_header(launch: TaskLaunch, liveness_s: float | None) -> dict[str, Any]:
    """What a helper reads first to become `launch`'s standby (no TF_CONFIG: it belongs to the next attempt)."""
    return {
        "standby": {
            "python": launch.python,
            "env": {key: value for key, value in launch.env.items() if key not in LATE_KEYS},
            "cwd": launch.cwd,
            "preload": list(launch.preload),
            "source": _SOURCE,
            "bootstrap": spare.SPARE_BOOTSTRAP,
        },
        "liveness_s": liveness_s,
    }


def task_header(launch: TaskLaunch, liveness_s: float | None = None) -> dict[str, Any]:
    """The header that starts `launch` in a helper (a fresh one, or a standby)."""
    return {"argv": launch.argv, "cwd": launch.cwd, "env": launch.env, "liveness_s": liveness_s}


class SpareWatch:
    """Reads a standby's event stream up to its one `spare` report, then leaves the stream (and
    whatever it buffered) to the task's readers. Invariant: `finish()` returns only once this
    reader no longer reads, so two readers never share the stream."""

    def __init__(self, events: Any, name: str) -> None:
        self.report: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._read, args=(events, name), daemon=True, name=f"spare-{name}")
        self._thread.start()

    def _read(self, events: Iterable[bytes], name: str) -> None:
        while True:
            raw = events.readline()  # type: ignore[attr-defined]  # a file object, read line by line
            if not raw:
                return
            parsed = parse_report(name, raw.decode("utf-8", "replace"))
            if parsed is not None and parsed.data["event"] == SPARE_EVENT:
                self.report = parsed.data
                return

    @property
    def ready(self) -> bool:
        return bool(self.report and self.report.get("ready"))

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the spare said whether it is ready (or the helper ended); its answer."""
        self._thread.join(timeout)
        return self.ready

    def finish(self) -> bool:
        """Wait for the report that follows an order; False when the helper never sent it."""
        self._thread.join(WATCH_FINISH_S)
        return not self._thread.is_alive()


class Standby(Protocol):
    """One standby session: made from `launch` (its task name and host), used by one start at most."""

    launch: TaskLaunch
    watch: SpareWatch

    def close(self) -> None: ...


class StandbyPool:
    """A transport's standbys by task name. `prepare` makes them in the background; `take` hands
    one to a start; `clear` closes the rest (after an attempt started, or at the end)."""

    def __init__(self, make: Callable[[TaskLaunch], Standby]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._standbys: dict[str, Standby] = {}
        self._generation = 0

    def prepare(self, launches: list[TaskLaunch], background: bool = True) -> None:
        """Standbys for these tasks (those with something to preload), made in a background
        thread: opening a session to a remote host takes a round trip."""
        wanted = [launch for launch in launches if launch.preload]
        if not wanted:
            return
        with self._lock:
            generation = self._generation
        if not background:
            self._make_all(wanted, generation)
            return
        threading.Thread(target=self._make_all, args=(wanted, generation), daemon=True, name="standbys").start()

    def _make_all(self, launches: list[TaskLaunch], generation: int) -> None:
        for launch in launches:
            try:
                standby = self._make(launch)
            except Exception as error:  # a spare is an optimisation: the restart starts cold instead
                log.debug("no standby for %s: %s", launch.name, error)
                continue
            with self._lock:
                current = generation == self._generation and launch.name not in self._standbys
                if current:
                    self._standbys[launch.name] = standby
            if not current:  # the attempt it was made for is over already
                standby.close()

    def take(self, launch: TaskLaunch) -> Standby | None:
        with self._lock:
            standby = self._standbys.pop(launch.name, None)
        if standby is not None and standby.launch.host_index != launch.host_index:
            standby.close()
            return None
        return standby

    def standing(self) -> list[Standby]:
        with self._lock:
            return list(self._standbys.values())

    def counts(self) -> tuple[int, int]:
        """(spares ready, standbys waiting)."""
        standbys = self.standing()
        return sum(1 for s in standbys if s.watch.ready), len(standbys)

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            standbys, self._standbys = list(self._standbys.values()), {}
        for standby in standbys:
            standby.close()
