#!/bin/sh
# Healthy: a container serving sshd (role `sshd`) accepts TCP on its port; other roles are healthy while running.
set -eu
[ -f /tmp/tflaunch-role-sshd ] || exit 0
exec python -c 'import os, socket; socket.create_connection(("127.0.0.1", int(os.environ.get("SSHD_PORT", "2222"))), 2).close()'
