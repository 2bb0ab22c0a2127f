"""Spare hosts and elastic gangs without processes: the spec's rules, the plan on a roster, membership's
decisions, the shares of a kept global batch, and when a gang grows back."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.main import main
from launcher.common.errors import SpecError
from launcher.plan import PlanInputs, build_plan
from launcher.spec.load import parse_spec
from launcher.supervise.gang import GangStatus, TaskStatus
from launcher.supervise.grow_back import GrowBack
from launcher.supervise.membership import Machine, Membership, membership_of
from worker.batch_shares import batch_shares
from worker.contract import SPEC_WORKERS_VAR, TF_CONFIG


def host(address: str, workers: int = 1, **extra: Any) -> dict[str, Any]:
    return {"address": address, "workers": workers, "ports": [7000 + k for k in range(workers)], **extra}


def spec_of(**extra: Any) -> dict[str, Any]:
    return {"name": "e", "hosts": [host("10.0.0.1"), host("10.0.0.2"), host("10.0.0.3")], **extra}


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_spec(data)
    return [f"{p.path.removeprefix('$.')}: {p.message}" for p in caught.value.problems]


@pytest.mark.parametrize(
    "extra, path, words",
    [
        ({"spare_hosts": [host("10.0.0.2")]}, "spare_hosts[0].address", "is also hosts[1]"),
        ({"spare_hosts": [host("10.0.0.9", 2)]}, "spare_hosts[0]", "the shape of no host"),
        ({"spare_hosts": [{"address": "10.0.0.9", "workers": 1}]}, "spare_hosts[0].ports", "explicit ports"),
        (
            {"spare_hosts": [host("10.0.0.9", chief=True, workers=0, ports=[7000])]},
            "spare_hosts[0].chief",
            "give it `workers`",
        ),
        ({"spare_hosts": [host("127.0.0.9")]}, "spare_hosts[0].address", "loopback"),
        ({"elastic": {"min_hosts": 3}}, "elastic.min_hosts", "could never shrink: give fewer than 3"),
        ({"hosts": [host("10.0.0.1", 2)], "elastic": {"min_hosts": 1}}, "elastic", "a gang of one host"),
        ({"spare_hosts": [host("10.0.0.9", ports=[0])]}, "spare_hosts[0].ports", "port 0"),
        ({"elastic": {"min_hosts": 0}}, "elastic.min_hosts", "greater than or equal to 1"),
        ({"elastic": {"min_hosts": 2}, "training": {"kind": "fit"}}, "elastic", "smaller global batch"),
        ({"elastic": {"min_hosts": 2, "max_hosts": 3}}, "elastic.max_hosts", ""),
        ({"spare_hosts": [host("10.0.0.9", env={"TF_CONFIG": "x"})]}, "spare_hosts[0].env.TF_CONFIG", "set by"),
    ],
)
def test_spare_and_elastic_mistakes_name_their_field(extra: dict[str, Any], path: str, words: str) -> None:
    found = problems(spec_of(**extra))
    assert any(p.startswith(path + ":") and words in p for p in found), found


def test_an_elastic_gang_with_an_evaluator_or_written_tasks_is_refused() -> None:
    hosts = [host("10.0.0.1"), host("10.0.0.2", evaluator=True, ports=[7000, 7001])]
    assert any(
        "evaluator" in p and p.startswith("hosts[1]") for p in problems(spec_of(hosts=hosts, elastic={"min_hosts": 1}))
    )
    written = [{"address": f"10.0.0.{i}", "tasks": [{"type": "worker", "index": i - 1, "port": 7000}]} for i in (1, 2)]
    assert any("`workers` form" in p for p in problems(spec_of(hosts=written, elastic={"min_hosts": 1})))


def test_check_refuses_a_bad_spare_with_exit_2_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.json"
    path.write_text(__import__("json").dumps(spec_of(spare_hosts=[host("10.0.0.1")])))
    assert main(["--cluster", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert "spare_hosts[0].address" in err and "Traceback" not in err


def plan_on(data: dict[str, Any], roster: dict[int, int] | None) -> dict[str, tuple[str, int, int]]:
    spec = parse_spec(data)
    plan = build_plan(spec, PlanInputs("/runs/e", 1, "/usr/bin/python3", "/w", roster=roster))
    return {t.name: (t.host, t.port, t.host_index) for t in plan.tasks}


def test_a_spare_in_a_seat_takes_its_task_names_with_its_own_address_and_ports() -> None:
    data = spec_of(spare_hosts=[{"address": "10.0.0.9", "workers": 1, "ports": [7100]}])
    assert plan_on(data, {0: 0, 1: 3, 2: 2}) == {
        "worker:0": ("10.0.0.1", 7000, 0),
        "worker:1": ("10.0.0.9", 7100, 3),
        "worker:2": ("10.0.0.3", 7000, 2),
    }


def test_a_gang_without_a_seat_numbers_its_workers_anew_and_is_told_the_spec_size() -> None:
    data = spec_of(elastic={"min_hosts": 2})
    assert plan_on(data, {0: 0, 2: 2}) == {"worker:0": ("10.0.0.1", 7000, 0), "worker:1": ("10.0.0.3", 7000, 2)}
    plan = build_plan(parse_spec(data), PlanInputs("/runs/e", 1, "/p", "/w", roster={0: 0, 2: 2}))
    config = __import__("json").loads(plan.tasks[1].task_env[TF_CONFIG])
    assert config["cluster"] == {"worker": ["10.0.0.1:7000", "10.0.0.3:7000"]}
    assert plan.tasks[1].env[SPEC_WORKERS_VAR] == "3"
    assert SPEC_WORKERS_VAR not in build_plan(parse_spec(spec_of()), PlanInputs("/r", 0, "/p", "/w")).tasks[0].env


def membership(spares: int = 1, min_hosts: int | None = None, chief_seats: frozenset[int] = frozenset()) -> Membership:
    machines = [Machine(f"h{i}", (1, 0), False) for i in range(3)] + [
        Machine(f"s{i}", (1, 0), True) for i in range(spares)
    ]
    return Membership(machines, [(1, 0)] * 3, chief_seats, min_hosts, exclude_after=2, cooldown_s=60)


def test_a_host_gone_for_good_gives_its_seat_to_a_spare_at_once() -> None:
    m = membership()
    change, kept = m.after_failure(1, {1: "cannot connect"}, now=100.0)
    assert change is not None and kept is None
    assert m.roster == {0: 0, 1: 3, 2: 2}
    assert "host h1 excluded for 60s (cannot connect): spare s0 takes its tasks" == change.says
    assert m.records()[0] | {"at": 0} == {
        "host": "h1",
        "reason": "cannot connect",
        "at": 0,
        "until": 160.0,
        "times": 1,
        "seat": 1,
        "replaced_by": "s0",
        "rejoined_at": None,
    }


def test_a_root_cause_is_excluded_after_two_failed_attempts_in_a_row_only() -> None:
    m = membership()
    assert m.after_failure(2, {}, 1.0) == (None, None)
    assert m.after_failure(0, {}, 2.0) == (None, None), "another host: the count starts again"
    assert m.after_failure(2, {}, 3.0) == (None, None)
    change, _ = m.after_failure(2, {}, 4.0)
    assert change is not None and "the root cause of 2 failed attempts in a row" in change.says
    assert m.roster[2] == 3


def test_without_a_spare_an_elastic_gang_shrinks_to_min_hosts_and_no_further() -> None:
    m = membership(spares=0, min_hosts=2)
    change, _ = m.after_failure(2, {2: "lost"}, 0.0)
    assert change is not None and "the gang goes on with 2 of its 3 hosts" in change.says and m.roster == {0: 0, 1: 1}
    change, kept = m.after_failure(1, {1: "lost"}, 1.0)
    assert change is None and m.roster == {0: 0, 1: 1}
    assert kept is not None and "h1 (lost): kept in the gang" in kept and "elastic.min_hosts=2" in kept
    assert m.after_failure(1, {1: "lost"}, 2.0) == (None, None), "said once"


def test_a_chief_seat_is_never_dropped_and_nothing_changes_for_a_plain_gang() -> None:
    m = membership(spares=0, min_hosts=1, chief_seats=frozenset({0}))
    assert m.after_failure(0, {0: "lost"}, 0.0)[0] is None
    assert not membership(spares=0).active


def test_the_cooldown_doubles_and_a_cooled_machine_takes_a_vacant_seat_back() -> None:
    m = membership(spares=0, min_hosts=1)
    m.after_failure(2, {2: "lost"}, 0.0)
    assert m.vacant(59.0) is None and m.vacant(60.0) == (2, 2)
    m.keep_out(2, "failed the preflight again", 60.0)
    assert m.excluded[2].until == 180.0 and m.vacant(179.0) is None
    says = m.rejoin(2, 2, 200.0)
    assert m.roster == {0: 0, 1: 1, 2: 2} and "restarts on 3 of its 3 hosts" in says
    assert m.records()[-1]["rejoined_at"] == 200.0


def test_membership_is_made_only_where_a_loss_can_change_the_gang() -> None:
    assert membership_of(parse_spec(spec_of())) is None
    made = membership_of(parse_spec(spec_of(spare_hosts=[host("10.0.0.9")])))
    assert made is not None and [m.spare for m in made.machines] == [False, False, False, True]


@pytest.mark.parametrize(
    "replicas, trainers, spec_workers, micro, global_batch, even, shares",
    [
        (3, 3, None, 1, 48, True, [(0, 16), (16, 16), (32, 16)]),
        (2, 2, 3, 1, 48, True, [(0, 24), (24, 24)]),  # the spec's 3 x 16 kept on 2 replicas
        (4, 2, 3, 2, 288, True, [(0, 72), (72, 72), (144, 72), (216, 72)]),  # 2 devices a task, 2 micro-batches
        (5, 5, 7, 1, 112, False, [(0, 23), (23, 23), (46, 22), (68, 22), (90, 22)]),
    ],
)
def test_the_global_batch_is_shared_without_a_gap_or_an_overlap(
    replicas: int, trainers: int, spec_workers: int | None, micro: int, global_batch: int, even: bool, shares: list
) -> None:
    per_replica = 16 if micro == 1 else 24
    found = batch_shares(per_replica, micro, replicas, trainers, spec_workers)
    assert (found.global_batch, found.even) == (global_batch, even)
    assert [found.share(r) for r in range(replicas)] == shares
    assert sum(size for _, size in shares) == global_batch


def status(steps: list[int | None]) -> GangStatus:
    tasks = tuple(TaskStatus(f"worker:{i}", "h", 1, True, s, None, 0.0, 0.0) for i, s in enumerate(steps))
    return GangStatus(1, 0, 0, 0.0, True, tasks)


def test_grow_back_checks_a_cooled_host_once_per_checkpoint_interval_then_says_it_rejoins() -> None:
    m = membership(spares=0, min_hosts=1)
    m.after_failure(2, {2: "lost"}, 0.0)
    checked = threading.Event()
    grow = GrowBack(m, lambda seat, roster: (checked.set(), None)[1], every_steps=20)
    said: list[str] = []
    assert not grow.poll(status([100, 100]), 61.0, said.append), "the attempt's first step: the interval starts"
    assert not grow.poll(status([119, 119]), 61.0, said.append) and not checked.is_set()
    assert not grow.poll(status([120, 120]), 61.0, said.append)
    assert checked.wait(5)
    grow._checking.join(5)  # type: ignore[union-attr]
    assert grow.poll(status([121, 121]), 62.0, said.append) and m.roster[2] == 2
    assert said == [
        "host h2 passed its preflight and rejoins: the gang saves at its next step and restarts on 3 of its 3 hosts"
    ]


def test_a_host_failing_its_preflight_again_stays_out_for_twice_as_long() -> None:
    m = membership(spares=0, min_hosts=1)
    m.after_failure(2, {2: "lost"}, 0.0)
    grow = GrowBack(m, lambda seat, roster: "cannot connect", every_steps=1)
    said: list[str] = []
    grow.poll(status([5, 5]), 61.0, said.append)
    grow.poll(status([6, 6]), 61.0, said.append)
    grow._checking.join(5)  # type: ignore[union-attr]
    assert not grow.poll(status([7, 7]), 62.0, said.append)
    assert m.excluded[2].until == 62.0 + 120.0 and "kept out for 120s more: cannot connect" in said[0]


def test_a_machine_out_again_counts_as_a_restart_and_the_cooldown_stays_bounded() -> None:
    m = Membership([Machine("h0", (1, 0), False), Machine("s0", (1, 0), True)], [(1, 0)], frozenset(), None, 1, 0.0)
    first, _ = m.after_failure(0, {}, 0.0)
    assert first is not None and first.first and "the root cause of 1 failed attempt in a row" in first.says
    spare_out, _ = m.after_failure(1, {}, 1.0)
    assert spare_out is not None and spare_out.first and "host h0 takes its tasks" in spare_out.says
    again, _ = m.after_failure(0, {}, 2.0)
    assert again is not None and not again.first, "h0 is out for the second time: counted"
    for at in range(3, 3000):  # a gang changing without end: never an overflow
        m.after_failure(m.roster[0], {}, float(at))
    assert m.excluded[0].times > 1000 and m.excluded[0].until - m.excluded[0].at <= 7 * 86400


def test_a_spare_is_blamed_only_for_its_own_problems(tmp_path: Path) -> None:
    from launcher.preflight import spares

    data = spec_of(spare_hosts=[host("10.0.0.4"), host("10.0.0.44")])
    spec = parse_spec(data)

    class Report:
        problems = ["10.0.0.44: cannot connect to root@10.0.0.44:22: refused"]

    original = spares.run_preflight
    spares.run_preflight = lambda *args: Report()  # type: ignore[assignment,return-value]
    try:
        plan = spares.spare_plan(spec, PlanInputs(str(tmp_path), 0, "/p", "/w"))
        failed = spares.check_spares(spec, plan, None)  # type: ignore[arg-type]
    finally:
        spares.run_preflight = original
    assert failed == {4: "10.0.0.44: cannot connect to root@10.0.0.44:22: refused"}


def test_a_gang_that_keeps_losing_hosts_ends_within_max_restarts(tmp_path: Path) -> None:
    """A task that fails wherever it runs, exclude_host_after 1 and no cooldown: each machine's first exclusion is
    free, the next ones count, so the run ends instead of swapping hosts for ever."""
    from launcher.supervise.policy import RestartPolicy
    from launcher.supervise.regroup import HostLoss
    from launcher.supervise.supervisor import Supervisor
    from tests.unit.fakes import FakeClock, FakeTransport

    spec = parse_spec(
        spec_of(
            hosts=[host("10.0.0.1"), host("10.0.0.2")],
            spare_hosts=[host("10.0.0.9")],
            restart={"max_restarts": 1, "exclude_host_after": 1, "host_cooldown_s": 0, "backoff_s": 0},
        )
    )
    loss = HostLoss(membership_of(spec))  # type: ignore[arg-type]

    def plan(attempt: int) -> Any:
        return build_plan(spec, PlanInputs(str(tmp_path), attempt, "/p", "/w", roster=dict(loss.membership.roster)))

    transport, notices = FakeTransport(), []
    sup = Supervisor(
        plan,
        transport,
        RestartPolicy(spec.restart),
        True,
        on_notice=notices.append,
        clock=FakeClock(),
        sleep=lambda s: None,
        host_loss=loss,
    )
    sup.start()
    for _ in range(20):
        if sup.state.is_terminal:
            break
        failing = next(t for t in transport.current(2) if t.launch.name == "worker:1")
        failing.exit(1)
        sup.step(0)
    assert sup.state.value == "failed", notices
    assert len(sup.result.attempts) <= 4, [a.reason for a in sup.result.attempts]  # type: ignore[union-attr]
    assert sup.restarts == 1 and any("not counted against max_restarts" in n for n in notices)


def test_a_spare_hosts_secret_is_masked_like_a_hosts() -> None:
    from launcher.spec.masked import redactor_of
    from launcher.spec.secrets import redactor_of_raw

    data = spec_of(spare_hosts=[host("10.0.0.9", env={"DB_PASS": "hunter2hunter2"})])
    for redactor in (redactor_of(parse_spec(data)), redactor_of_raw(data)):
        assert redactor.text("password hunter2hunter2 refused") == "password **** refused"
