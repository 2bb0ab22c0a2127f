"""A script that talks to a service on this machine's loopback (an MLflow server, say), which is not
there from a local gang's private network."""

import socket
import sys

with socket.socket() as probe:  # a port nothing listens on, here or in the tasks' network
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
socket.create_connection(("localhost", port), timeout=5)
sys.exit(0)
