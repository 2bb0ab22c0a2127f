"""The SSH transport against a real OpenSSH sshd on loopback aliases, with real TensorFlow workers."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from launcher.agent.bootstrap import BOOTSTRAP
from tests.conftest import (
    HELPERS,
    launch_cmd,
    launcher_traceback,
    processes_mentioning,
    run_launch,
    wait_until_gone,
    write_spec,
)
from tests.integration.test_train_local import assert_agree, results
from tests.labs.ports import free_port
from tests.labs.sshd import SshServer
from tests.labs.waiting import wait_for_text

pytestmark = pytest.mark.tf


def ssh_host(server: SshServer, address: str, **ssh: Any) -> dict[str, Any]:
    return {"address": address, "ports": [free_port()], "ssh": server.ssh_settings(**ssh)}


def ssh_spec(work: Path, name: str, hosts: list[dict[str, Any]], **training: Any) -> dict[str, Any]:
    return {
        "name": name,
        "run_root": str(work / "runs"),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(HELPERS)},
        "hosts": hosts,
        "training": {"kind": "builtin", "steps": 60, "checkpoint_every": 20, "log_every": 10, **training},
        "restart": {"max_restarts": 0, "backoff_s": 0, "grace_period_s": 5},
    }


def test_two_ssh_hosts_train_and_no_env_value_is_on_a_command_line(work: Path, sshd: SshServer) -> None:
    secret = f"tok-{secrets.token_hex(6)}"
    spec = ssh_spec(work, "two", [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3")], steps=400)
    spec["env"]["MY_API_TOKEN"] = secret
    accepted_before, sessions_before = sshd.accepted_connections(), sshd.sessions_started()
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(write_spec(work, spec))), cwd=work, stdout=handle, stderr=subprocess.STDOUT
        )
        wait_for_text(log, "[worker:1@127.0.0.3]", 120, lambda: proc.poll() is None)
        wait_for_text(log, "step 50/", 120, lambda: proc.poll() is None)
        ours = [p for p in processes_mentioning(str(work)) if p.pid != proc.pid]
        # an importing spare gets TF_CONFIG with its task only; a forked one shares its task's environment block,
        # but runs a thread or two until its order, where a training worker runs TensorFlow's dozens
        workers = [p for p in ours if "TF_CONFIG" in p.environ() and p.num_threads() > 4]
        assert len(workers) == 2, "expected one worker per SSH host"
        for worker in [*ours]:  # each, worker or spare, under its host's agent, started by an sshd session
            agent = worker.parent()
            assert agent is not None and agent.cmdline()[-1] == BOOTSTRAP
            # the spec names no python: `python3` on the host's PATH, a wrapper that execs the project's
            assert agent.cmdline()[0] == sys.executable
            assert any(p.name() == "sshd" for p in agent.parents())
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                cmdline = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:  # exited meanwhile
                continue
            assert secret not in cmdline, f"secret on a command line: {cmdline}"
            assert "TF_CONFIG" not in cmdline and '"cluster"' not in cmdline, f"TF_CONFIG on a command line: {cmdline}"
        assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    found = results(work / "runs" / "two", 0)
    assert_agree(found, 2, 400)
    text = log.read_text()
    assert "[worker:0@127.0.0.2]" in text and "[worker:1@127.0.0.3]" in text
    assert (work / "runs" / "two" / "attempt-0" / "worker-1.log").read_text().count("step 400/400") == 1
    # one connection and one session per host: its agent answered the preflight, ran the task and
    # kept its warm spare (a session costs a login shell on the host)
    assert sshd.accepted_connections() - accepted_before == 2
    assert sshd.sessions_started() - sessions_before == 2


def test_sixteen_tasks_on_a_host_with_a_stock_sshd(work: Path, sshd: SshServer) -> None:
    """OpenSSH's default MaxSessions is 10 per connection: a host's tasks and spares share one."""
    host = {
        "address": "127.0.0.2",
        "workers": 16,
        "ports": [free_port() for _ in range(16)],
        "ssh": sshd.ssh_settings(),
    }
    spec = ssh_spec(work, "sixteen", [host])
    spec["training"] = {"kind": "command", "argv": ["python", "-c", "import os; print(os.environ['TFLAUNCH_TASK'])"]}
    sessions_before = sshd.sessions_started()
    proc = run_launch(["--cluster", str(write_spec(work, spec))], work, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sum(f"[worker:{i}@127.0.0.2] worker:{i}" in proc.stdout for i in range(16)) == 16
    assert sshd.sessions_started() - sessions_before == 1


def test_a_host_whose_agent_cannot_start_is_named_with_the_reason(work: Path, sshd: SshServer) -> None:
    spec = ssh_spec(work, "nopython", [ssh_host(sshd, "127.0.0.2")])
    spec["python"] = "no-such-python3"
    proc = run_launch(["--cluster", str(write_spec(work, spec)), "--check"], work, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "127.0.0.2: the agent did not start with python 'no-such-python3'" in proc.stderr, proc.stderr
    assert "not found" in proc.stderr and "Traceback" not in proc.stderr


def test_mixed_local_and_ssh_hosts(work: Path, sshd: SshServer) -> None:
    local = {"address": "127.0.0.4", "transport": "local", "ports": [free_port()]}
    spec = ssh_spec(work, "mixed", [local, ssh_host(sshd, "127.0.0.2")])
    proc = run_launch(["--cluster", str(write_spec(work, spec))], work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_agree(results(work / "runs" / "mixed", 0), 2, 60)
    assert "[worker:0] " in proc.stdout and "[worker:1@127.0.0.2]" in proc.stdout


def test_remote_worker_killed_restarts_the_gang_over_ssh(work: Path, sshd: SshServer) -> None:
    spec = ssh_spec(work, "kill", [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3")], tensorboard=True)
    spec["restart"].update(max_restarts=1, warm_spares_after_s=0)  # spares ready for the early fault
    spec["checkpoint_dir"] = str(work / "shared" / "kill")
    proc = run_launch(["--cluster", str(write_spec(work, spec)), "--inject", "kill:worker:1@step=30"], work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = work / "runs" / "kill"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["attempts"]) == 2 and "SIGKILL" in summary["attempts"][0]["reason"]
    # each restarted task ran in the warm spare its host kept under the standby helper
    assert summary["attempts"][1]["recovery"]["warm_tasks"] == 2, json.dumps(summary["attempts"][1]["recovery"])
    assert summary["attempts"][1]["recovery"]["forked_tasks"] == 2, "forked by the runtime, adopted by the agent"
    found = results(run_dir, 1)
    assert_agree(found, 2, 60)
    assert {r["start_step"] for r in found.values()} == {20}
    # the remote chief's rows came over the event channel; its files sit beside the shared checkpoints
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["attempt"] == 1][-1] == 60
    outputs = summary["outputs"]
    assert outputs["model"] == str(work / "shared" / "kill" / "model")
    assert (work / "shared" / "kill" / "model" / "model.keras").is_file()
    assert list((work / "shared" / "kill" / "tensorboard").glob("events.out.tfevents.*"))
    status = run_launch(["status", str(run_dir)], work)
    assert f"tensorboard  {work / 'shared' / 'kill' / 'tensorboard'}" in status.stdout, status.stdout


def test_sigkill_of_launch_leaves_no_remote_worker(work: Path, sshd: SshServer) -> None:
    spec = ssh_spec(
        work,
        "orphans",
        [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3")],
        steps=100000,
        checkpoint_every=10000,
    )
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(write_spec(work, spec))), cwd=work, stdout=handle, stderr=subprocess.STDOUT
        )
        wait_for_text(log, "step 20/", 120, lambda: proc.poll() is None)
        proc.kill()
        proc.wait()
    assert not wait_until_gone(str(work), timeout=5), "remote workers outlived their launcher"


def test_dropped_ssh_connection_stops_everything_and_names_the_host(work: Path, sshd: SshServer) -> None:
    spec = ssh_spec(
        work, "drop", [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3")], steps=100000, checkpoint_every=10000
    )
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(write_spec(work, spec))), cwd=work, stdout=handle, stderr=subprocess.STDOUT
        )
        wait_for_text(log, "step 20/", 120, lambda: proc.poll() is None)
        sessions = sshd.sessions_serving("127.0.0.3")
        assert sessions, "no sshd session serves 127.0.0.3"
        for session in sessions:
            session.kill()
        code = proc.wait(timeout=60)
    text = log.read_text()
    assert code == 1
    assert (
        "root cause: worker:1 on 127.0.0.3" in text
        and "connection to 127.0.0.3 closed" in text
        and "SSH session" in text
    )
    assert not wait_until_gone(str(work), timeout=10)


def test_host_keys_strict_by_default_opt_in_records_them(work: Path, sshd: SshServer) -> None:
    known = work / "known_hosts"
    spec = ssh_spec(work, "keys", [ssh_host(sshd, "127.0.0.2", known_hosts=str(known)), ssh_host(sshd, "127.0.0.3")])
    path = write_spec(work, spec)
    rejected = run_launch(["--cluster", str(path), "--check"], work)
    assert rejected.returncode == 2
    assert "127.0.0.2: unknown host key" in rejected.stderr and "accept_unknown_host_keys" in rejected.stderr
    assert "Traceback" not in rejected.stderr

    spec["hosts"][0]["ssh"]["accept_unknown_host_keys"] = True
    accepted = run_launch(["--cluster", str(write_spec(work, spec)), "--check"], work)
    assert accepted.returncode == 0, accepted.stderr
    assert sshd.host_public_key.split()[1] in known.read_text(), "the accepted key was not recorded"

    key_type, key_data = sshd.host_public_key.split()[:2]
    other = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "other")], check=True)
    assert other.returncode == 0
    wrong = (work / "other.pub").read_text().split()[1]
    known.write_text(f"[127.0.0.2]:{sshd.port} {key_type} {wrong}\n")
    changed = run_launch(["--cluster", str(write_spec(work, spec)), "--check"], work)
    assert changed.returncode == 2 and "has CHANGED" in changed.stderr, changed.stderr


def test_known_hosts_markers_comments_and_appending(work: Path, sshd: SshServer) -> None:
    key_type, key_data = sshd.host_public_key.split()[:2]
    known = work / "ssh" / "known_hosts"
    known.parent.mkdir()
    authority = f"@cert-authority *.example.com {key_type} {key_data}"
    known.write_text(f"# fleet keys\n{authority}\n[127.0.0.3]:{sshd.port} {key_type} {key_data}\n")
    hosts = [ssh_host(sshd, "127.0.0.2", known_hosts=str(known)), ssh_host(sshd, "127.0.0.3", known_hosts=str(known))]
    spec = ssh_spec(work, "markers", hosts)

    unknown = run_launch(["--cluster", str(write_spec(work, spec)), "--check"], work)
    assert unknown.returncode == 2, unknown.stderr
    assert "127.0.0.2: unknown host key" in unknown.stderr and "@cert-authority, line 2" in unknown.stderr
    assert "127.0.0.3" not in unknown.stderr, "a host with its own key must not suffer from a marker line"

    spec["hosts"][0]["ssh"]["accept_unknown_host_keys"] = True
    before = known.read_text()
    accepted = run_launch(["--cluster", str(write_spec(work, spec)), "--check"], work)
    assert accepted.returncode == 0, accepted.stderr
    after = known.read_text()
    assert after.startswith(before) and after[len(before) :] == f"[127.0.0.2]:{sshd.port} {key_type} {key_data}\n"

    known.write_text(f"{before}@revoked [127.0.0.2]:{sshd.port} {key_type} {key_data}\n")
    revoked = run_launch(["--cluster", str(write_spec(work, spec)), "--check"], work)
    assert revoked.returncode == 2
    assert "127.0.0.2: the host key of" in revoked.stderr and "@revoked" in revoked.stderr, revoked.stderr
    assert known.read_text().count(key_data) == 3, "a revoked key must never be recorded again"


def test_wrong_user_key_is_a_clear_error(work: Path, sshd: SshServer) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "stranger")], check=True)
    spec = ssh_spec(
        work, "auth", [ssh_host(sshd, "127.0.0.2", identity_file=str(work / "stranger")), ssh_host(sshd, "127.0.0.3")]
    )
    started = time.monotonic()
    proc = run_launch(["--cluster", str(write_spec(work, spec))], work)
    assert proc.returncode == 2
    assert "127.0.0.2: authentication as root failed" in proc.stderr
    assert time.monotonic() - started < 15
    assert not (work / "runs" / "auth" / "attempt-0").exists(), "nothing may start when a host fails preflight"


def test_an_agent_that_ends_while_its_first_line_is_sent_is_named_with_its_words(sshd: SshServer) -> None:
    """A python that is not there ends the session while the agent's first line is still being written (a
    line larger than the SSH window makes sure; a short one can lose the race too): the host's error names
    the python and the shell's words, not a closed socket."""
    from launcher.common.errors import HostError
    from launcher.spec.hosts import HostSpec
    from launcher.transport.session import AgentSession
    from launcher.transport.ssh import SshMedium

    medium = SshMedium([HostSpec.model_validate(ssh_host(sshd, "127.0.0.3"))], ["/no/python3"])
    try:
        channel = medium.open([0], b"x" * (8 << 20) + b"\n")[0]
        assert not isinstance(channel, HostError), channel
        with pytest.raises(HostError) as raised:
            AgentSession("127.0.0.3", "/no/python3", channel, liveness_s=30).wait_ready(timeout=30)
    finally:
        medium.close()
    said = str(raised.value)
    assert "the agent did not start with python '/no/python3'" in said and "No such file" in said, said


def test_preflight_reports_taken_ports_and_missing_python(work: Path, sshd: SshServer) -> None:
    import socket

    holder = socket.socket()
    holder.bind(("", 0))
    holder.listen()
    try:
        hosts = [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3")]
        hosts[0]["ports"] = [holder.getsockname()[1]]
        hosts[1]["python"] = "/no/python3"
        proc = run_launch(["--cluster", str(write_spec(work, ssh_spec(work, "pre", hosts))), "--check"], work)
    finally:
        holder.close()
    assert proc.returncode == 2
    assert f"127.0.0.2: port {hosts[0]['ports'][0]} for worker:0 is not free" in proc.stderr
    assert "127.0.0.3: the agent did not start with python '/no/python3'" in proc.stderr


def test_shell_metacharacters_in_a_host_never_run(work: Path, sshd: SshServer) -> None:
    marker = work / "pwned"
    spec = ssh_spec(work, "meta", [ssh_host(sshd, f"127.0.0.2;touch {marker}"), ssh_host(sshd, "127.0.0.3")])
    proc = run_launch(["--cluster", str(write_spec(work, spec)), "--check"], work)
    assert proc.returncode == 2 and "$.hosts[0].address" in proc.stderr
    spec = ssh_spec(work, "meta2", [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3")])
    spec["hosts"][0]["workdir"] = f"/tmp; touch {marker}"
    proc = run_launch(["--cluster", str(write_spec(work, spec)), "--check"], work)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert not marker.exists()


def test_frozen_sshd_session_is_a_lost_host_and_its_worker_stops_itself(work: Path, sshd: SshServer) -> None:
    """A frozen session (SIGSTOP: no FIN, no RST, no data) looks like a silent partition from both ends."""
    settings = {"liveness_timeout_s": 3}
    hosts = [ssh_host(sshd, "127.0.0.2", **settings), ssh_host(sshd, "127.0.0.3", **settings)]
    spec = ssh_spec(work, "frozen", hosts, steps=100000, checkpoint_every=10000)
    log = work / "launch.out"
    frozen: list[Any] = []
    try:
        with open(log, "w") as handle:
            proc = subprocess.Popen(
                launch_cmd("--cluster", str(write_spec(work, spec))), cwd=work, stdout=handle, stderr=subprocess.STDOUT
            )
            wait_for_text(log, "step 20/", 120, lambda: proc.poll() is None)
            serving = sshd.sessions_serving("127.0.0.3")
            assert serving, "no sshd session serves 127.0.0.3"
            worker = next(p for p in processes_mentioning(str(work)) if "127.0.0.3" in str(p.environ()))
            frozen = [p for s in serving for p in [s, *s.children(recursive=True)] if p.name() == "sshd"]
            frozen_at = time.monotonic()
            for session in frozen:
                session.suspend()
            code = proc.wait(timeout=60)
            noticed_s = time.monotonic() - frozen_at
            gone, _ = psutil.wait_procs([worker], timeout=max(0.1, frozen_at + 6 - time.monotonic()))
            worker_gone_s = time.monotonic() - frozen_at
    finally:
        for session in frozen:
            try:
                session.kill()
            except psutil.NoSuchProcess:  # exited meanwhile
                pass
    text = log.read_text()
    assert code == 1, text[-3000:]
    assert "nothing from 127.0.0.3" in text and "liveness_timeout_s=3" in text, text[-3000:]
    assert not launcher_traceback(text), text[-3000:]
    assert noticed_s < 3 + 4, f"the launcher took {noticed_s:.1f}s to notice"
    assert gone, f"the worker on the frozen host still runs {worker_gone_s:.1f}s after the freeze"
