"""How a host's SSH settings are resolved: the spec first, then ~/.ssh/config, then defaults."""

from __future__ import annotations

from pathlib import Path

from launcher.agent.bootstrap import BOOTSTRAP, remote_command
from launcher.spec.hosts import HostSpec
from launcher.transport.ssh_client import resolve_target
from tests.conftest import REPO


def test_ssh_config_supplies_hostname_user_port_and_identity(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "Host node-a\n  HostName 10.1.2.3\n  User trainer\n  Port 2200\n  IdentityFile ~/.ssh/cluster_key\n"
    )
    target = resolve_target(HostSpec(address="node-a", ports=[5000]), str(config))
    assert (target.hostname, target.user, target.port) == ("10.1.2.3", "trainer", 2200)
    assert target.identity_files[0].endswith("/.ssh/cluster_key") and not target.identity_files[0].startswith("~")
    assert target.key_name == "[10.1.2.3]:2200"
    assert target.accept_unknown is False


def test_spec_settings_win_over_ssh_config(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host node-a\n  User trainer\n  Port 2200\n")
    host = HostSpec.model_validate(
        {
            "address": "node-a",
            "ports": [5000],
            "ssh": {"user": "ops", "port": 22, "known_hosts": str(tmp_path / "kh"), "accept_unknown_host_keys": True},
        }
    )
    target = resolve_target(host, str(config))
    assert (target.user, target.port, target.known_hosts, target.accept_unknown) == (
        "ops",
        22,
        str(tmp_path / "kh"),
        True,
    )
    assert target.key_name == "node-a"


def test_missing_ssh_config_uses_defaults(tmp_path: Path) -> None:
    target = resolve_target(HostSpec(address="10.0.0.9", ports=[5000]), str(tmp_path / "none"))
    assert (target.hostname, target.port, target.identity_files) == ("10.0.0.9", 22, ())
    assert target.known_hosts.endswith("/.ssh/known_hosts")


def test_remote_command_is_fixed_and_quoted() -> None:
    command = remote_command("/opt/my env/python3")
    assert command.startswith("'/opt/my env/python3' -I -S -u -c ")
    assert BOOTSTRAP in command.replace("'\"'\"'", "'")
    assert "TF_CONFIG" not in command


_LAZY_INVOKE = """
import inspect, sys
from launcher.spec.hosts import HostSpec
from launcher.transport.ssh_client import resolve_target
import paramiko
inspect.getmodule(resolve_target.__code__)  # reads every module's __file__, the stand-in's too
before = [m for m in ("asyncio", "yaml") if m in sys.modules]  # what invoke would have brought
target = resolve_target(HostSpec.model_validate({"address": "box", "workers": 1}), sys.argv[1])
print(before, target.hostname, target.port, [m for m in ("asyncio", "yaml") if m in sys.modules])
"""


def test_paramiko_loads_invoke_only_for_a_match_exec(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "config"
    config.write_text('Match exec "test -d /"\n  HostName 127.0.0.9\n  Port 2222\n')
    proc = subprocess.run(
        [sys.executable, "-c", _LAZY_INVOKE, str(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[:3] == ["[]", "127.0.0.9", "2222"], "invoke was loaded before a Match exec needed it"
    assert proc.stdout.split()[3] != "[]", "the Match exec did not load invoke"


def test_the_ssh_config_is_parsed_once_per_version_not_once_per_host(tmp_path: Path) -> None:
    from launcher.transport.ssh_client import _read_config

    config = tmp_path / "config"
    config.write_text("Host a\n  Port 2201\n")
    first, _ = _read_config("a", str(config))
    assert _read_config("b", str(config))[0] is first  # a fleet's hosts share one parse
    config.write_text("Host a\n  Port 2202\n  User u\n")  # changed: read again
    again, _ = _read_config("a", str(config))
    assert again is not first and again.lookup("a")["port"] == "2202"
