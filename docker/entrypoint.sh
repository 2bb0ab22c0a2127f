#!/bin/sh
# Entry point of the tflaunch image. Every private key stays in the volume of the one container that
# uses it; only public keys cross between containers.
#   host-key       make, once, this host's SSH host key in /keys (its own volume).
#   sshd           serve this container as a worker host: its host key (made first if missing), sshd
#                  unprivileged (as `trainer`) on $SSHD_PORT, accepting only the launcher's public key
#                  from /authorized-keys (mounted read-only), restricted to plain command sessions.
#   keys HOST...   the launcher's side, in /keys (its own volume): make, once, the client key; publish
#                  its public key as /authorized-keys/authorized_keys (`restrict`ed); wait for each
#                  host's public host key in /host-keys/HOST (that host's volume, mounted read-only)
#                  and write a known_hosts that pins them.
#   launch ARGS... `keys` first when TFLAUNCH_KEYS_FOR names the worker hosts, wait until every
#                  remote host of the spec (--cluster FILE) accepts connections on its SSH port, then
#                  run `launch ARGS...`.
#   anything else  runs as given.
set -eu
KEYS=${TFLAUNCH_KEYS:-/keys}
AUTHORIZED=${TFLAUNCH_AUTHORIZED_KEYS:-/authorized-keys}
HOST_KEYS=${TFLAUNCH_HOST_KEYS:-/host-keys}
WAIT_S=${TFLAUNCH_WAIT_S:-120}
SSHD_PORT=${SSHD_PORT:-2222}

wait_for_file() {
  waited=0
  until [ -s "$1" ]; do
    if [ "$waited" -ge "$WAIT_S" ]; then
      echo "$2" >&2
      exit 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
}

make_host_key() {
  umask 077
  if [ ! -s "$KEYS/ssh_host_ed25519_key.pub" ]; then
    rm -f "$KEYS/ssh_host_ed25519_key"
    ssh-keygen -q -t ed25519 -N '' -C "${TFLAUNCH_HOST:-$(hostname)}" -f "$KEYS/ssh_host_ed25519_key"
    echo "host-key: made the host key of ${TFLAUNCH_HOST:-$(hostname)} in $KEYS"
  fi
}

serve_sshd() {
  make_host_key
  touch /tmp/tflaunch-role-sshd
  exec /usr/sbin/sshd -D -e -f /opt/tflaunch/docker/sshd_config -p "$SSHD_PORT" -h "$KEYS/ssh_host_ed25519_key" \
    -o AuthorizedKeysFile="$AUTHORIZED/authorized_keys"
}

make_keys() {
  [ "$#" -gt 0 ] || { echo "keys: name the worker hosts, e.g. 'keys worker-0 worker-1'" >&2; exit 2; }
  umask 077
  mkdir -p "$KEYS/client"
  made=""
  if [ ! -s "$KEYS/client/id_ed25519.pub" ]; then
    rm -f "$KEYS/client/id_ed25519"
    ssh-keygen -q -t ed25519 -N '' -C tflaunch-launcher -f "$KEYS/client/id_ed25519"
    made="a client key"
  fi
  [ -w "$AUTHORIZED" ] || { echo "keys: cannot write $AUTHORIZED: mount there, read-write, the volume the workers read the client's public key from" >&2; exit 2; }
  # what the workers accept: the client key for plain command sessions only (no pty, no forwarding)
  authorized="restrict $(cut -d' ' -f1,2 "$KEYS/client/id_ed25519.pub") tflaunch-launcher"
  if [ "$(cat "$AUTHORIZED/authorized_keys" 2>/dev/null)" != "$authorized" ]; then
    printf '%s\n' "$authorized" > "$AUTHORIZED/.authorized_keys.partial"
    chmod 644 "$AUTHORIZED/.authorized_keys.partial"
    mv "$AUTHORIZED/.authorized_keys.partial" "$AUTHORIZED/authorized_keys"
  fi
  # known_hosts pins the host key each host made in its own volume; written last and replaced
  # whole: a known_hosts file means the set is complete
  pinned="$KEYS/.known_hosts.partial"
  : > "$pinned"
  repinned=""
  for host in "$@"; do
    public="$HOST_KEYS/$host/ssh_host_ed25519_key.pub"
    wait_for_file "$public" "keys: $public did not appear within ${WAIT_S}s; is the volume of $host mounted there, and is $host up?"
    line=$(printf '[%s]:%s %s' "$host" "$SSHD_PORT" "$(cut -d' ' -f1,2 "$public")")
    printf '%s\n' "$line" >> "$pinned"
    if grep -qxF "$line" "$KEYS/known_hosts" 2>/dev/null; then
      :
    elif grep -qF "[$host]:$SSHD_PORT " "$KEYS/known_hosts" 2>/dev/null; then
      repinned="${repinned:+$repinned, }$host (its key changed)"
    else
      repinned="${repinned:+$repinned, }$host"
    fi
  done
  if [ -z "$made$repinned" ] && cmp -s "$pinned" "$KEYS/known_hosts"; then
    rm -f "$pinned"
    echo "keys: $KEYS already holds the client key and pins the host keys of $*; kept"
    return 0
  fi
  mv "$pinned" "$KEYS/known_hosts"
  echo "keys: ${made:+made $made; }pinned the host keys of ${repinned:-$*}"
}

wait_for_hosts() {
  python - "$WAIT_S" "$@" <<'PY'
import socket, sys, time
from pathlib import Path

from launcher.common.errors import LaunchError
from launcher.spec.load import load_spec

wait_s, args = float(sys.argv[1]), sys.argv[2:]
path = next((a.split("=", 1)[1] for a in args if a.startswith("--cluster=")), None)
if path is None and "--cluster" in args[:-1]:
    path = args[args.index("--cluster") + 1]
try:
    spec = load_spec(Path(path)) if path else None
except LaunchError:
    spec = None  # launch itself reports every problem of the spec
# the SSH port as launch will use it when the spec names one; otherwise 22 (~/.ssh/config is launch's)
targets = [(h.address, (h.ssh.port if h.ssh else None) or 22) for h in (spec.hosts if spec else []) if not h.is_local]
deadline = time.monotonic() + wait_s
for address, port in targets:
    while True:
        try:
            socket.create_connection((address, port), timeout=2).close()
            break
        except OSError as error:
            if time.monotonic() > deadline:
                print(f"launch: {address}:{port} did not accept SSH connections within {wait_s:g}s ({error})",
                      file=sys.stderr)
                sys.exit(1)
            time.sleep(0.5)
    print(f"[entrypoint] {address}:{port} accepts SSH connections", flush=True)
PY
}

role=${1:-}
case "$role" in
  host-key) make_host_key ;;
  sshd) serve_sshd ;;
  keys) shift; make_keys "$@" ;;
  launch)
    shift
    # shellcheck disable=SC2086 # a list of host names
    if [ -n "${TFLAUNCH_KEYS_FOR:-}" ]; then make_keys $TFLAUNCH_KEYS_FOR; fi
    wait_for_hosts "$@"
    exec launch "$@" ;;
  *) exec "$@" ;;
esac
