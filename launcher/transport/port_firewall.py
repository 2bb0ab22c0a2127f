"""A firewall rule that keeps other machines off a local gang's ports, where no private network can
be made and the launcher runs as root.

One nftables table per launch, `inet tflaunch_<pid>_<start>` (the launcher's pid and start time),
whose input chain refuses (a TCP reset) a connection to one of the gang's ports that does not come
through the loopback device; traffic between the tasks is loopback traffic, so it passes. A table of
its own rejects whatever other tables accept: nftables drops a packet that any base chain drops.
It is removed when the launch ends. A table left by a launcher killed outright is removed by the next
local launch as root: each table has a mark, a file of its name in /run/tflaunch-rules (root's, and
gone at boot with the tables), so that a launch with no mark to look at runs no nft at all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from launcher.agent.keeper import start_time as start_ticks

_PREFIX = "tflaunch_"
_OURS = re.compile(rf"\btable inet ({_PREFIX}(\d+)_(\d+))\b")
_TIMEOUT_S = 10.0
MARKS = "/run/tflaunch-rules"


class FirewallUnavailable(Exception):
    """Why no rule could be added (no nft, not root, the kernel refused), and the fix where one is known."""

    def __init__(self, why: str, fix: str | None = None) -> None:
        super().__init__(why)
        self.fix = fix


def _nft() -> str:
    found = shutil.which("nft")
    if found is None:
        raise FirewallUnavailable("no nft (nftables) for a firewall rule", "install nftables (apt install nftables)")
    return found


def _run(nft: str, args: list[str], script: str | None = None) -> str:
    try:
        done = subprocess.run(
            [nft, *args], input=script, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise FirewallUnavailable(f"nft did not run ({error})") from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise FirewallUnavailable(f"nft refused the rule ({said[:200]})")
    return done.stdout


def _remove_stale(nft: str) -> None:
    """Tables of launchers that are gone (killed before they could remove theirs), marked or not."""
    for found in _OURS.finditer(_run(nft, ["list", "tables"])):
        if _gone(found):
            try:
                _run(nft, ["delete", "table", "inet", found.group(1)])
            except FirewallUnavailable:  # another launcher removed it first
                pass
            _unmark(found.group(1))


def remove_stale_rules() -> None:
    """As root: remove the tables of launchers that are gone, found by their marks. Asked by every
    local launch, whatever keeps its ports: a table left behind would refuse the same ports to it."""
    if os.geteuid() != 0:
        return
    try:
        marks = os.listdir(MARKS)
    except OSError:  # no mark: no table of ours (the usual case, at no cost)
        return
    stale = [name for name in marks if (found := _OURS.fullmatch(f"table inet {name}")) and _gone(found)]
    if not stale:
        return
    try:
        nft = _nft()
    except FirewallUnavailable:
        return
    for name in stale:
        try:
            _run(nft, ["delete", "table", "inet", name])
        except FirewallUnavailable:  # already removed (by hand, or by another launcher)
            pass
        _unmark(name)


def _gone(found: re.Match[str]) -> bool:
    return start_ticks(int(found.group(2))) != int(found.group(3))


def _mark(table: str) -> None:
    try:
        os.makedirs(MARKS, mode=0o700, exist_ok=True)
        with open(os.path.join(MARKS, table), "x"):
            pass
    except OSError:  # /run not writable: a table left behind is then found by the next rule's full look
        pass


def _unmark(table: str) -> None:
    try:
        os.unlink(os.path.join(MARKS, table))
        os.rmdir(MARKS)  # the last mark: nothing of ours is left in /run
    except OSError:  # gone already, or another launcher's mark is still there
        pass


class PortFirewall:
    """The rule for `ports`, added at construction (FirewallUnavailable: it could not be) and
    removed by `close`."""

    def __init__(self, ports: list[int]) -> None:
        if os.geteuid() != 0:
            raise FirewallUnavailable("not root, which a firewall rule needs", "launch as root for a firewall rule")
        self._nft = _nft()
        _remove_stale(self._nft)
        self.table = f"{_PREFIX}{os.getpid()}_{start_ticks(os.getpid()) or 0}"
        _mark(self.table)  # before the table: a launcher killed in between leaves a mark, not a table unmarked
        listed = ", ".join(str(port) for port in sorted(set(ports)))
        try:
            _run(
                self._nft,
                ["-f", "-"],
                f"table inet {self.table} {{\n"
                f"  set ports {{ type inet_service; elements = {{ {listed} }}; }}\n"
                "  chain input {\n"
                "    type filter hook input priority -1; policy accept;\n"
                '    iifname != "lo" tcp dport @ports reject with tcp reset\n'
                "  }\n"
                "}\n",
            )
        except FirewallUnavailable:
            _unmark(self.table)
            raise

    def cover(self, ports: list[int]) -> None:
        """Refuse these ports too (a later attempt's)."""
        listed = ", ".join(str(port) for port in sorted(set(ports)))
        if listed:
            try:
                _run(self._nft, ["add", "element", "inet", self.table, "ports", f"{{ {listed} }}"])
            except FirewallUnavailable:  # the table is gone (removed by hand): nothing to add to
                pass

    def close(self) -> None:
        try:
            _run(self._nft, ["delete", "table", "inet", self.table])
        except FirewallUnavailable:  # already gone; a later launch removes one that is not
            return
        _unmark(self.table)
