"""The quick host-list forms (-H, --hostfile), the spec they make, and --fresh moving old runs aside."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.request import HOST_LIST_PORT, LaunchRequest, parse_host_list, read_hostfile, request_spec
from launcher.common.errors import SpecError, UsageError
from launcher.rundir.checkpoint_mark import MARKER
from launcher.rundir.fresh import start_over
from launcher.rundir.place import place_of
from tests.conftest import REPO


def test_a_host_list_gives_each_host_its_workers() -> None:
    assert parse_host_list("a:2,b:3,c") == (("a", 2), ("b", 3), ("c", 1))
    assert parse_host_list("[::1]:2,10.0.0.5:1") == (("::1", 2), ("10.0.0.5", 1))


@pytest.mark.parametrize("text", ["a:0", "a:x", "a:2,,b", "a,a:2", "", "a:257", "a:2,b,A"])
def test_a_bad_host_list_names_the_entry(text: str) -> None:
    with pytest.raises(UsageError, match="HOST|more than once"):
        parse_host_list(text)


def test_a_login_in_a_host_list_or_hostfile_is_refused_without_its_password(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        parse_host_list("bob:hunter2x@node1:2")
    assert "'bob:****@node1:2' in -H: a host list takes no user; give the host alone ('node1:2')" in str(caught.value)
    assert "hunter2x" not in str(caught.value) and "never a password" in str(caught.value)
    with pytest.raises(UsageError, match="'bob@node1' in -H: a host list takes no user"):
        parse_host_list("bob@node1")
    with pytest.raises(UsageError) as caught:
        parse_host_list("node0,bob:pw1,ss99@node1")  # a comma in the password: no part of it is quoted
    assert "a host list takes no user" in str(caught.value)
    assert "ss99" not in str(caught.value) and "pw1" not in str(caught.value)
    path = tmp_path / "hosts"
    path.write_text("bob:hunter2x@node1 slots=2\n")
    with pytest.raises(UsageError, match=r"hosts:1: got 'bob:\*\*\*\*@node1 slots=2'"):
        read_hostfile(str(path))


def test_a_hostfile_in_the_usual_forms(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("# fleet\nnode1 slots=4\nnode2:2\n\nnode3   # one worker\n")
    assert read_hostfile(str(path)) == (("node1", 4), ("node2", 2), ("node3", 1))


@pytest.mark.parametrize("line", ["node1 slots=x", "node1:2 slots=2", "node1 extra", "node1 slots=0", "node1:99999"])
def test_a_bad_hostfile_line_is_named_by_number(tmp_path: Path, line: str) -> None:
    path = tmp_path / "hosts"
    path.write_text(f"node0\n{line}\n")
    with pytest.raises(UsageError, match=r"hosts:2: got"):
        read_hostfile(str(path))


def test_a_hostfile_with_a_byte_order_mark_or_more_hosts_than_a_launch_takes(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_bytes(b"\xef\xbb\xbfnode1:2\nnode2\n")
    assert read_hostfile(str(path)) == (("node1", 2), ("node2", 1))
    path.write_text("".join(f"node{i}\n" for i in range(100_000)))
    with pytest.raises(UsageError, match="lists more than 4096 hosts"):
        read_hostfile(str(path))
    with pytest.raises(UsageError, match="lists more than 4096 hosts"):
        parse_host_list(",".join(f"n{i}" for i in range(5000)))


def test_a_missing_or_empty_hostfile(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="Cannot read --hostfile"):
        read_hostfile(str(tmp_path / "none"))
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(UsageError, match="lists no hosts"):
        read_hostfile(str(tmp_path / "empty"))


def test_a_host_list_makes_a_spec_with_those_hosts(tmp_path: Path) -> None:
    spec = request_spec(LaunchRequest(hosts=(("localhost", 2), ("127.0.0.2", 1)), run_root=str(tmp_path)))
    assert spec.name == "hosts"
    assert [(h.address, h.worker_count) for h in spec.hosts] == [("localhost", 2), ("127.0.0.2", 1)]
    assert spec.hosts[0].ports is None and spec.hosts[1].ports == [HOST_LIST_PORT]


@pytest.mark.parametrize("request_kind", ["local", "hosts"])
def test_spec_less_runs_quiet_tensorflow_unless_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request_kind: str
) -> None:
    asked = {"local": 2} if request_kind == "local" else {"hosts": (("localhost", 2),)}
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    spec = request_spec(LaunchRequest(run_root=str(tmp_path), **asked))  # type: ignore[arg-type]
    assert spec.env == {"TF_CPP_MIN_LOG_LEVEL": "1"}
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    spec = request_spec(LaunchRequest(run_root=str(tmp_path), **asked))  # type: ignore[arg-type]
    assert spec.env == {"TF_CPP_MIN_LOG_LEVEL": "0"}, "the launcher's own setting, to local and remote tasks alike"


def test_a_spec_given_as_a_dict_is_validated_like_a_file(tmp_path: Path) -> None:
    data = json.loads((REPO / "cluster.example.json").read_text())
    spec = request_spec(LaunchRequest(cluster=data, run_root=str(tmp_path), command=("python3", "-c", "pass")))
    assert spec.training.kind == "command" and spec.run_root == str(tmp_path)


def _fresh(request: LaunchRequest, cwd: Path) -> list[str]:
    """`--fresh` for the request's run, from `cwd`."""
    spec = request_spec(request)
    return start_over(spec, place_of(spec, str(cwd)))


def _run(tmp_path: Path, checkpoint_dir: str | None = None) -> tuple[LaunchRequest, Path]:
    data: dict = {"name": "r", "run_root": str(tmp_path / "runs"), "hosts": [{"address": "localhost", "workers": 1}]}
    if checkpoint_dir is not None:
        data["checkpoint_dir"] = checkpoint_dir
    return LaunchRequest(cluster=data), tmp_path / "runs" / "r"


def test_fresh_moves_the_run_and_its_checkpoints_aside_and_deletes_nothing(tmp_path: Path) -> None:
    request, run_dir = _run(tmp_path)
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "launch.lock").write_text("")  # what every launch leaves
    (run_dir / "checkpoints" / "ckpt-40.index").write_text("x")
    moved = _fresh(request, tmp_path)
    assert not run_dir.exists() and len(moved) == 1
    (aside,) = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("r.old-")]
    assert (aside / "checkpoints" / "ckpt-40.index").read_text() == "x"
    run_dir.mkdir()
    _fresh(request, tmp_path)  # a second fresh start in the same second
    assert len([p for p in (tmp_path / "runs").iterdir() if p.name.startswith("r.old-")]) == 2


def test_fresh_moves_checkpoints_kept_outside_the_run(tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "ckpt"
    shared.mkdir(parents=True)
    (shared / "checkpoint").write_text("x")
    request, run_dir = _run(tmp_path, str(shared))
    moved = _fresh(request, tmp_path)
    assert moved and not shared.exists()
    assert [p.name.startswith("ckpt.old-") for p in (tmp_path / "shared").iterdir()] == [True]


def test_fresh_refuses_what_it_cannot_move(tmp_path: Path) -> None:
    request, run_dir = _run(tmp_path, "gs://bucket/run")
    with pytest.raises(UsageError, match="object store"):
        _fresh(request, tmp_path)


def test_nothing_to_move_is_not_an_error(tmp_path: Path) -> None:
    request, run_dir = _run(tmp_path)
    assert _fresh(request, tmp_path) == []


@pytest.mark.parametrize(
    ("where", "why"),
    [
        (".", "holds the run directory"),
        ("runs", "holds the run directory"),
        ("shared-open", "is writable by anybody"),
        ("project", "holds no checkpoints of a launch"),
    ],
)
def test_fresh_leaves_a_checkpoint_dir_that_is_not_the_runs_own_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, why: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "precious.txt").write_text("mine")
    (tmp_path / "runs" / "r").mkdir(parents=True)
    (tmp_path / "runs" / "other-run").mkdir()
    (tmp_path / "shared-open").mkdir(mode=0o777)
    (tmp_path / "shared-open").chmod(0o1777)
    (tmp_path / "shared-open" / "someones.txt").write_text("theirs")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "notes.txt").write_text("mine")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    request, run_dir = _run(tmp_path, str(tmp_path / where) if where != "." else ".")
    with pytest.raises(UsageError, match=f"--fresh will not move aside checkpoint_dir .*: it {why}"):
        _fresh(request, tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_fresh_moves_a_checkpoint_dir_a_launch_marked(tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "ckpt"
    shared.mkdir(parents=True)
    (shared / MARKER).write_text("{}")
    (shared / "model.keras").write_text("a script's own save")
    request, run_dir = _run(tmp_path, str(shared))
    assert _fresh(request, tmp_path) and not shared.exists()


def test_fresh_leaves_a_checkpoint_dir_that_held_the_users_files_before_its_first_launch(tmp_path: Path) -> None:
    code = tmp_path / "code"  # `checkpoint_dir: "code"`, where the user's script and spec live
    code.mkdir()
    (code / "run.py").write_text("the user's")
    (code / MARKER).write_text(json.dumps({"found": ["run.py", "spec.json"], "found_at": 1.0}))
    (code / "model.keras").write_text("a script's own save")
    request, run_dir = _run(tmp_path, str(code))
    with pytest.raises(UsageError, match=r"also holds what was there before the run's first launch \(run.py\)"):
        _fresh(request, tmp_path)
    assert (code / "run.py").exists() and (code / "model.keras").exists()


def test_fresh_leaves_the_directory_launched_from_where_it_is(tmp_path: Path) -> None:
    (tmp_path / "project" / "deep").mkdir(parents=True)
    (tmp_path / "project" / "checkpoint").write_text("looks like one")
    request, run_dir = _run(tmp_path, str(tmp_path / "project"))
    with pytest.raises(UsageError, match="it holds the directory you launched from"):
        _fresh(request, tmp_path / "project" / "deep")
    assert (tmp_path / "project" / "checkpoint").exists()


def test_a_hostfile_takes_ipv6_addresses_as_h_does(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("::1\n[::2]:2\n[::3] slots=3\nfd00::5 slots=4\n")
    assert read_hostfile(str(path)) == (("::1", 1), ("::2", 2), ("::3", 3), ("fd00::5", 4))
    assert parse_host_list("[::1]:2,[fd00::5]") == (("::1", 2), ("fd00::5", 1))
    assert parse_host_list("::1,fd00::5") == (("::1", 1), ("fd00::5", 1))  # bare, as the hostfile takes them


def test_a_bare_ipv6_address_with_a_count_in_h_is_told_to_use_brackets() -> None:
    with pytest.raises(UsageError, match=r"an IPv6 address goes in brackets: \[::1\]:2"):
        parse_host_list("fd00::5:2x")


def test_fresh_leaves_another_runs_checkpoints_a_link_and_a_folder_of_indexes_where_they_are(tmp_path: Path) -> None:
    cases = {}
    other = tmp_path / "other-run-ckpt"  # marked by the run in runs/A
    other.mkdir()
    (other / MARKER).write_text(json.dumps({"run_dir": str(tmp_path / "runs" / "A")}))
    (other / "checkpoint").write_text("x")
    cases[other] = "holds the checkpoints of the run in"
    parent = tmp_path / "ckroot"  # another launch's checkpoint directory inside it
    (parent / "sub").mkdir(parents=True)
    (parent / "sub" / MARKER).write_text("{}")
    (parent / "checkpoint").write_text("x")
    cases[parent] = "holds another launch's checkpoint directory"
    target = tmp_path / "real-ckpt"
    target.mkdir()
    (target / "checkpoint").write_text("x")
    (tmp_path / "linked").symlink_to(target)
    cases[tmp_path / "linked"] = "is a symbolic link"
    search = tmp_path / "search-data"
    search.mkdir()
    (search / "words.index").write_text("an index of something else")
    cases[search] = "holds no checkpoints of a launch"
    for where, why in cases.items():
        request, run_dir = _run(tmp_path, str(where))
        with pytest.raises(UsageError, match=why):
            _fresh(request, tmp_path)
    assert (other / "checkpoint").exists() and (parent / "sub" / MARKER).exists() and (target / "checkpoint").exists()
    assert (tmp_path / "linked").is_symlink() and (search / "words.index").exists()


def test_fresh_moves_a_checkpoint_dir_that_is_the_run_directory_itself_with_it(tmp_path: Path) -> None:
    request, run_dir = _run(tmp_path, str(tmp_path / "runs" / "r"))
    run_dir.mkdir(parents=True)
    (run_dir / "launch.lock").write_text("")
    (run_dir / "checkpoint").write_text("x")
    moved = _fresh(request, tmp_path)
    assert len(moved) == 1 and moved[0].startswith("run directory") and not run_dir.exists()


def test_a_directory_of_the_users_named_as_the_run_directory_is_neither_written_nor_moved(tmp_path: Path) -> None:
    from launcher.cli.launch_command import check
    from launcher.rundir.refusals import NOT_ANOTHER_DIRECTORY, refuse_run_dir

    request, run_dir = _run(tmp_path)
    run_dir.mkdir(parents=True)
    (run_dir / "spec.json").write_text('{"mine": 1}')
    (run_dir / "results.csv").write_text("precious")
    spec = request_spec(request)
    refusals = (lambda: refuse_run_dir(str(run_dir), (NOT_ANOTHER_DIRECTORY,)), lambda: _fresh(request, tmp_path))
    for attempt in refusals:
        with pytest.raises(UsageError, match=r"exists and holds files no launch wrote \(results\.csv\)"):
            attempt()
    with pytest.raises(UsageError, match="holds files no launch wrote"):
        check(spec, place_of(spec), None)
    assert (run_dir / "spec.json").read_text() == '{"mine": 1}' and sorted(p.name for p in tmp_path.iterdir()) == [
        "runs"
    ]
    (run_dir / "launch.lock").write_text("")  # a launch's run directory: used as before
    refuse_run_dir(str(run_dir), (NOT_ANOTHER_DIRECTORY,))
    mine = tmp_path / "mine"  # names a launch writes too, and nothing only a launch writes: the user's
    (mine / "model").mkdir(parents=True)
    (mine / "checkpoints").mkdir()
    (mine / "metrics.jsonl").write_text("")
    with pytest.raises(UsageError, match="holds files no launch wrote"):
        refuse_run_dir(str(mine), (NOT_ANOTHER_DIRECTORY,))
    (mine / "summary.json").write_text("{}")  # an older launch's, before its lock
    refuse_run_dir(str(mine), (NOT_ANOTHER_DIRECTORY,))


def test_the_guess_of_local_hosts_counts_those_an_early_agent_can_serve(tmp_path: Path) -> None:
    from launcher.cli.request import local_hosts_here

    spec = tmp_path / "c.json"
    hosts = [
        {"address": "localhost"},
        {"address": "127.0.0.2", "transport": "local"},
        {"address": "127.0.0.3", "transport": "local", "python": "/opt/py/bin/python"},  # another python
        {"address": "gpu-1"},
    ]
    spec.write_text(json.dumps({"hosts": hosts}))
    assert local_hosts_here(str(spec), None, None) == 2
    assert local_hosts_here(None, 2, None) == 1 and local_hosts_here(None, None, "localhost:2,gpu-1,127.0.0.1") == 2
    assert local_hosts_here(None, None, "[::1]:2,gpu-1") == 1
    assert local_hosts_here(None, None, "::1:2") == 0  # the address ::1:2, not ::1
    spec.write_text("{not json")
    assert local_hosts_here(str(spec), None, None) == 0
    os.mkfifo(tmp_path / "piped")  # `--cluster <(cat c.json)`: never read by the guess (it would drain it)
    assert local_hosts_here(str(tmp_path / "piped"), None, None) == 0


@pytest.mark.parametrize(
    ("asked", "said"),
    [
        ({"local": 1, "run_root": "runs "}, "--run-root: 'runs ' ends with a space"),
        ({"local": 1, "name": "a b"}, '--name: got "a b", which has characters'),
        ({"local": 1, "command": ("python3", "-c", "a\nb")}, "The command after --, word 3: contains a newline: put"),
    ],
)
def test_a_bad_value_from_a_flag_is_named_by_its_flag_not_by_a_spec_path(asked: dict[str, Any], said: str) -> None:
    with pytest.raises(UsageError) as refused:
        request_spec(LaunchRequest(**asked))
    assert str(refused.value).startswith(said) and str(refused.value).endswith(". Nothing was started."), refused.value


def test_a_spec_files_own_problem_keeps_its_path_beside_a_flags(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"name": "c", "hosts": [{"address": "localhost", "workers": "two"}]}))
    with pytest.raises(SpecError, match=r"\$\.hosts\[0\]\.workers: got \"two\""):
        request_spec(LaunchRequest(cluster=str(path), run_root="runs "))


def test_a_run_root_that_is_itself_a_run_directory_is_refused(tmp_path: Path) -> None:
    """`--run-root runs/mine` for the run runs/mine would start runs/mine/mine over instead of resuming."""
    run_dir = tmp_path / "runs" / "mine"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text("{}")
    with pytest.raises(UsageError) as refused:
        request_spec(LaunchRequest(local=1, name="mine", run_root=str(run_dir)))
    said = str(refused.value)
    assert f"run_root {run_dir} is itself a run directory (it holds summary.json)" in said
    assert f"give the directory above the run ({tmp_path / 'runs'})" in said and not (run_dir / "mine").exists()
    assert request_spec(LaunchRequest(local=1, name="mine", run_root=str(tmp_path / "runs"))).name == "mine"
    (run_dir / "attempt-0").mkdir()
    for inside in (run_dir / "attempt-0", run_dir / "checkpoints" / "a"):  # its checkpoints too, made or not
        (inside).mkdir(parents=True, exist_ok=True)
        with pytest.raises(UsageError, match=f"lies inside the run {run_dir} \\(it holds attempt-0\\)"):
            request_spec(LaunchRequest(local=1, run_root=str(inside)))
    (tmp_path / "slurm-7.out").write_text("")  # sbatch's output where the jobs were submitted: not a run
    assert request_spec(LaunchRequest(local=1, run_root=str(tmp_path))).run_root == str(tmp_path)


def test_a_flag_secret_is_masked_in_a_refusal_of_its_control_character() -> None:
    with pytest.raises(UsageError) as refused:
        request_spec(LaunchRequest(local=1, command=("python3", "-c", "x", "--password=hunter2hunter2\x07")))
    said = str(refused.value)
    assert said.startswith('The command after --, word 4: contains the control character U+0007 ("****")'), said
    assert "hunter2" not in said


@pytest.mark.parametrize(
    "command, name",
    [
        ((), "local"),
        (("python", "train.py"), "train"),
        (("python3", "-u", "/x/my train.py", "--steps", "3"), "my-train"),
        (("python", "-m", "pkg.train"), "pkg.train"),
        (("./run.sh",), "run"),
        (("python", "-c", "print(1)"), "local"),
    ],
)
def test_a_run_without_a_spec_is_named_after_its_script(command: tuple[str, ...], name: str) -> None:
    from launcher.cli.request import LaunchRequest, request_spec

    assert request_spec(LaunchRequest(local=1, command=command)).name == name
    assert request_spec(LaunchRequest(local=1, command=command, name="mine")).name == "mine"
