"""Host addresses and object-store URLs as a spec names them: which address is this machine,
which only works here, one key per machine, and the URL forms TensorFlow would refuse late.

Pure and without pydantic: the spec's validators, the plan, the preflight and the command line's
host lists all ask the same questions here. Whether a path is a URL at all is `worker.contract.is_url`,
the one test the whole project (the host agent included) uses."""

from __future__ import annotations

import functools
import ipaddress
import re

from launcher.spec.paths import brief
from worker.contract import URL_SCHEME

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback", "localhost.localdomain"})


SCHEME_SLIP = re.compile(f"(?:{URL_SCHEME})?:+/")  # a scheme's colon then a slash: `gs:/b`, `gs:://b`, `://b`


IP_LIKE = re.compile(r"[0-9.]+|.*:.*")  # every IP address has this form (not every match is one)


_THIS_MACHINE_IPS = (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))


def not_a_url(text: str) -> str:
    """Why `text`, which holds `://`, is not taken for a URL (see is_url)."""
    if any(c.isspace() for c in text):
        return "a URL has no spaces"
    scheme = text.partition("://")[0]
    if not re.fullmatch(URL_SCHEME, scheme):
        if not scheme:
            return "no scheme before '://'"
        return f"{brief(scheme)} is no scheme: a scheme is a letter, then letters, digits, '+', '.' or '-', as gs or s3"
    return "nothing follows '://'"  # with a scheme and no space, anything after it would make a URL


@functools.lru_cache(maxsize=8192)  # a host's address is parsed by several checks: parse it once
def parse_ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not IP_LIKE.fullmatch(address.strip("[]")):  # a host name: skip ipaddress's two failing parses
        return None
    try:
        return ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return None


def plain_ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    ip = parse_ip(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_loopback(address: str) -> bool:
    """Whether `address` only works on this machine: localhost, 127.0.0.0/8, ::1 in any spelling.

    No other machine can reach such an address, so it cannot be mixed with real remote hosts."""
    name = address.lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    ip = plain_ip(name)
    return ip is not None and ip.is_loopback


def is_this_machine(address: str) -> bool:
    """localhost, 127.0.0.1 or ::1, however spelled: the launcher's own machine.

    Other 127.x.y.z aliases are separate simulated hosts (each may run its own sshd)."""
    name = address.lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    ip = plain_ip(name)
    return ip is not None and ip in _THIS_MACHINE_IPS


def localhost_hint(address: str) -> str:
    """` (did you mean localhost?)` for an address that reads like a misspelt `localhost`."""
    import difflib

    near = address.lower() != "localhost" and difflib.SequenceMatcher(None, address.lower(), "localhost").ratio() >= 0.8
    return f"; or, if {address} was meant to be this machine: did you mean localhost?" if near else ""


def host_port(address: str, port: int) -> str:
    """`host:port`, with an IPv6 address in brackets as URLs and TF_CONFIG write it."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def machine_key(address: str) -> str:
    """One key per machine: every spelling of this machine is 'localhost'; IPs in canonical form."""
    if is_this_machine(address):
        return "localhost"
    ip = plain_ip(address)
    return ip.compressed if ip is not None else address.lower().rstrip(".")


_BUCKETED = ("gs", "s3", "s3a", "az", "abfs", "abfss", "wasb", "wasbs")  # scheme://BUCKET/path


def check_store_url(url: str) -> None:
    """ValueError for an object-store URL TensorFlow would refuse only once every task runs: its file
    systems are looked up by the scheme as written (`GS://` is none of them), Google Cloud Storage's
    is `gs` (not `gcs`), and a bucket-addressed scheme needs its bucket (`gs:///run` has none)."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() == "gcs":
        raise ValueError(f"{url!r}: TensorFlow names Google Cloud Storage gs://, not gcs://: write gs://{rest}")
    if scheme != scheme.lower():
        raise ValueError(
            f"{url!r}: TensorFlow finds a file system by its scheme as written, in lower case: "
            f"write {scheme.lower()}://{rest}"
        )
    if scheme in _BUCKETED and (rest.startswith("/") or not rest.split("/", 1)[0]):
        raise ValueError(f"{url!r} names no bucket: write {scheme}://BUCKET/{rest.lstrip('/')}")


# An object store's scheme with `://` mistyped (`gs:/b`, `gs//b`, `s3:b`): never meant as a directory name.
URL_SLIP = re.compile(r"(gs|s3|s3a|hdfs|az|abfss?|wasbs?|viewfs|ram)(?::/?(?!/)|//)", re.IGNORECASE)
