"""Grow back: a gang that went on without a seat takes a machine into it again once the machine's
cooldown is over and it passes the preflight again, by the preemption path (every task saves at the
same next step and leaves; the gang restarts on the larger roster with no step lost).

At most once per checkpoint interval: only after the attempt trained `every_steps` steps past the step it
started from. The preflight runs on a thread of its own, so the gang's supervision never waits for a
host that takes its time to answer. Only for the built-in runtime, which saves on SIGTERM; other kinds
take a machine back at their next restart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from launcher.supervise.gang import GangStatus
from launcher.supervise.membership import Membership

# (seat, the roster with the machine in it) -> the preflight's problems, None when it passes
Check = Callable[[int, dict[int, int]], str | None]


@dataclass
class GrowBack:
    membership: Membership
    check: Check
    every_steps: int
    _started_at_step: int | None = None
    _checking: threading.Thread | None = None
    _outcome: tuple[int, int, str | None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    rejoined: str | None = None  # the address of the machine that rejoined last: in the reason of the attempt it ends

    def new_attempt(self) -> None:
        self._started_at_step = None

    def poll(self, status: GangStatus, now: float, say: Callable[[str], None]) -> bool:
        """Whether the gang should save and restart now, a machine having taken a vacant seat."""
        steps = [t.step for t in status.tasks if t.step is not None]
        if len(steps) < len(status.tasks) or not steps:  # not every task trains yet
            return False
        if self._started_at_step is None:
            self._started_at_step = min(steps)
        with self._lock:
            outcome, self._outcome = self._outcome, None
            checking = self._checking is not None and self._checking.is_alive()
        if outcome is not None:
            seat, machine, problems = outcome
            if seat in self.membership.roster or machine in self.membership.roster.values():
                return False  # the roster changed meanwhile (a restart took the machine or filled the seat)
            if problems is None:
                say(self.membership.rejoin(seat, machine, now))
                self.rejoined = self.membership.machines[machine].address
                return True
            out = self.membership.keep_out(machine, f"failed the preflight again: {problems}", now)
            say(f"host {out.host} is kept out for {out.until - now:g}s more: {problems}")
            return False
        if checking or min(steps) - self._started_at_step < self.every_steps:
            return False
        vacant = self.membership.vacant(now)
        if vacant is not None:
            roster = {**self.membership.roster, vacant[0]: vacant[1]}  # read here: the main thread changes it
            thread = threading.Thread(target=self._check, args=(*vacant, roster), daemon=True, name="grow-back")
            with self._lock:
                self._checking = thread
            thread.start()
        return False

    def _check(self, seat: int, machine: int, roster: dict[int, int]) -> None:
        try:
            problems = self.check(seat, roster)
        except Exception as error:  # noqa: BLE001 - a preflight that breaks keeps the machine out, never the run
            problems = f"the preflight failed: {error}"
        with self._lock:
            self._outcome = (seat, machine, problems)
