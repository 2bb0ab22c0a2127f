"""Which machines hold the gang's seats: a host gone for good is excluded and a spare takes its seat,
or, where `elastic` allows, the gang goes on without the seat. Pure: no clocks (`now` comes in), no
processes; the supervisor asks after each failed attempt and plans the next one on `roster`.

A seat is a position of the spec's `hosts` (its tasks); a machine, a position of `hosts` then
`spare_hosts` (launcher/plan.py). A machine is excluded when it cannot be reached or started again, or
when it was the root cause of `exclude_after` failed attempts in a row, and only where that helps:
when a machine can take its seat or the gang may shrink. An exclusion lasts `cooldown_s`, doubled each
time the same machine is excluded again; then the machine may take a seat again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from launcher.spec.elastic import shape_of
from launcher.spec.models import ClusterSpec

Shape = tuple[int, int]  # (tasks, GPUs): what a machine must match to take a seat
_LONGEST_COOLDOWN_S = 7 * 86400.0


@dataclass(frozen=True)
class Machine:
    """One machine as membership sees it: where it is, the seat shape it fits, and whether it is a spare."""

    address: str
    shape: Shape
    spare: bool


@dataclass(frozen=True)
class Exclusion:
    """A machine kept out of the gang, why, and until when (wall clock)."""

    host: str
    reason: str
    at: float
    until: float
    times: int  # how many times this machine has been excluded (the cooldown doubles with each)
    seat: int | None  # the seat it held
    replaced_by: str | None  # the machine that took its seat; None: the gang went on without it
    rejoined_at: float | None = None  # when it took a seat again (grow back)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Change:
    """A new roster and what the console says of it, once."""

    says: str
    excluded: tuple[Exclusion, ...]

    @property
    def first(self) -> bool:
        """Every machine it takes out is out for the first time: its restart is not counted (a machine out
        again, or a gang changing without end, counts against max_restarts as any restart does)."""
        return all(exclusion.times == 1 for exclusion in self.excluded)


@dataclass
class Membership:
    """The roster of one launch and the machines kept out of it.

    `seat_shapes`: the shape of every seat (each host of the spec); `chief_seats`: seats a shrink cannot
    drop (the chief's: a spare may take them)."""

    machines: Sequence[Machine]
    seat_shapes: Sequence[Shape]
    chief_seats: frozenset[int]
    min_hosts: int | None  # None: not elastic, the gang never shrinks
    exclude_after: int = 2
    cooldown_s: float = 60.0
    roster: dict[int, int] = field(default_factory=dict)
    excluded: dict[int, Exclusion] = field(default_factory=dict)  # machine -> its latest exclusion
    history: list[Exclusion] = field(default_factory=list)
    _blamed: int | None = None
    _strikes: int = 0
    _kept_said: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.roster:
            self.roster = {seat: seat for seat in range(len(self.seat_shapes))}

    @property
    def active(self) -> bool:
        """Whether a loss can change anything: there is a spare, or the gang may shrink."""
        return any(m.spare for m in self.machines) or (
            self.min_hosts is not None and self.min_hosts < len(self.seat_shapes)
        )

    def seat_of(self, machine: int) -> int | None:
        return next((seat for seat, m in self.roster.items() if m == machine), None)

    def after_failure(self, root: int | None, gone: dict[int, str], now: float) -> tuple[Change | None, str | None]:
        """After a failed attempt: `root`, the machine its root cause ran on (None: not known); `gone`, the
        machines that cannot be reached or started again, with why. Returns the change of roster, if any,
        and what to say once of a machine that should go but has nowhere to go."""
        if root is not None and root == self._blamed:
            self._strikes += 1
        else:
            self._blamed, self._strikes = root, 1 if root is not None else 0
        out = dict(gone)
        if root is not None and root not in out and self._strikes >= self.exclude_after:
            out[root] = f"the root cause of {self._strikes} failed attempt{'s' if self._strikes > 1 else ''} in a row"
        made: list[Exclusion] = []
        kept: list[str] = []
        for machine, reason in sorted(out.items()):
            exclusion = self._exclude(machine, reason, now)
            if exclusion is None:
                if machine not in self._kept_said:
                    self._kept_said.add(machine)
                    kept.append(f"{self.machines[machine].address} ({reason})")
                continue
            made.append(exclusion)
            if machine == self._blamed:
                self._blamed, self._strikes = None, 0
        says_kept = None
        if kept:
            says_kept = (
                f"{', '.join(kept)}: kept in the gang, as no spare host can take its tasks"
                + ("" if self.min_hosts is None else f" and elastic.min_hosts={self.min_hosts} leaves none to spare")
                + "; add spare_hosts or elastic to go on without it"
            )
        if not made:
            return None, says_kept
        return Change("; ".join(self._describe(e) for e in made), tuple(made)), says_kept

    def _exclude(self, machine: int, reason: str, now: float) -> Exclusion | None:
        """Take `machine` out of its seat: a free machine of the seat's shape takes it, else the seat is
        dropped where `min_hosts` allows. None (nothing changed) when neither can be done."""
        seat = self.seat_of(machine)
        if seat is None:
            return None
        stand_in = self._free_machine(self.seat_shapes[seat], now, but=machine)
        if stand_in is None and not self._may_drop(seat):
            return None
        times = self.excluded[machine].times + 1 if machine in self.excluded else 1
        until = now + self._cooldown(times)
        if stand_in is None:
            del self.roster[seat]
        else:
            self.roster[seat] = stand_in
        exclusion = Exclusion(
            self.machines[machine].address,
            reason,
            now,
            until,
            times,
            seat,
            None if stand_in is None else self.machines[stand_in].address,
        )
        self.excluded[machine] = exclusion
        self.history.append(exclusion)
        return exclusion

    def vacant(self, now: float) -> tuple[int, int] | None:
        """A seat the gang went on without and a machine free to take it (its cooldown over): (seat, machine)."""
        for seat in range(len(self.seat_shapes)):
            if seat not in self.roster:
                machine = self._free_machine(self.seat_shapes[seat], now, but=-1)
                if machine is not None:
                    return seat, machine
        return None

    def rejoin(self, seat: int, machine: int, now: float) -> str:
        """`machine` takes the vacant `seat` (it passed its preflight again); returns what to say."""
        self.roster[seat] = machine
        latest = self.excluded.get(machine)
        if latest is not None:
            self.excluded[machine] = replace(latest, rejoined_at=now)
            self.history[self.history.index(latest)] = self.excluded[machine]
        return (
            f"host {self.machines[machine].address} passed its preflight and rejoins: the gang saves at its next "
            f"step and restarts on {len(self.roster)} of its {len(self.seat_shapes)} hosts"
        )

    def keep_out(self, machine: int, reason: str, now: float) -> Exclusion:
        """A machine in no seat (a spare that failed its preflight) kept out for a cooldown."""
        times = self.excluded[machine].times + 1 if machine in self.excluded else 1
        exclusion = Exclusion(
            self.machines[machine].address, reason, now, now + self._cooldown(times), times, None, None
        )
        self.excluded[machine] = exclusion
        self.history.append(exclusion)
        return exclusion

    def _cooldown(self, times: int) -> float:
        """`cooldown_s`, doubled with each exclusion of the same machine after its first (at most a week)."""
        return min(self.cooldown_s * 2 ** min(times - 1, 20), _LONGEST_COOLDOWN_S)

    def _free_machine(self, shape: Shape, now: float, but: int) -> int | None:
        """A machine of `shape` in no seat and not kept out: the spares first, in the spec's order."""
        seated = set(self.roster.values())
        for index, machine in sorted(enumerate(self.machines), key=lambda im: (not im[1].spare, im[0])):
            if index == but or index in seated or machine.shape != shape:
                continue
            exclusion = self.excluded.get(index)
            if exclusion is None or exclusion.until <= now:
                return index
        return None

    def _may_drop(self, seat: int) -> bool:
        return self.min_hosts is not None and seat not in self.chief_seats and len(self.roster) - 1 >= self.min_hosts

    def _describe(self, exclusion: Exclusion) -> str:
        lasts = exclusion.until - exclusion.at
        what = f"host {exclusion.host} excluded for {lasts:g}s ({exclusion.reason})"
        if exclusion.replaced_by is not None:
            taker = next(m for m in self.machines if m.address == exclusion.replaced_by)
            return f"{what}: {'spare' if taker.spare else 'host'} {exclusion.replaced_by} takes its tasks"
        return f"{what}: the gang goes on with {len(self.roster)} of its {len(self.seat_shapes)} hosts"

    def records(self) -> list[dict[str, Any]]:
        """Every exclusion of this launch, for summary.json and status.json."""
        return [e.to_json() for e in self.history]


def membership_of(spec: ClusterSpec) -> Membership | None:
    """The launch's membership, where a host's loss can change it: the spec has spares or is elastic."""
    if not spec.spare_hosts and spec.elastic is None:
        return None
    machines = [Machine(h.address, shape_of(h), False) for h in spec.hosts]
    machines += [Machine(h.address, shape_of(h), True) for h in spec.spare_hosts]
    chiefs = frozenset(i for i, h in enumerate(spec.hosts) if any(t.type == "chief" for t in spec.task_entries(h)))
    return Membership(
        machines,
        [shape_of(h) for h in spec.hosts],
        chiefs,
        spec.elastic.min_hosts if spec.elastic is not None else None,
        spec.restart.exclude_host_after,
        spec.restart.host_cooldown_s,
    )
