"""A free TCP port, for the servers and tasks tests start: no test uses a fixed port."""

from __future__ import annotations

import socket


def free_port(address: str = "") -> int:
    """A port nothing listens on at `address` ('' or 0.0.0.0: every interface), as the kernel picks one.

    Free when asked, not reserved: a test that starts a server on it right away is what every lab does."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])
