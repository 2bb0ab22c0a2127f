#!/bin/sh
# Entry point of the tflaunch image. Roles:
#   keys HOST...   make, once, the cluster's SSH keys in /keys (a volume): the launcher's client key,
#                  one host key per worker host, authorized_keys, and a known_hosts that pins every
#                  host key. A volume that already holds a complete set is left as it is.
#   sshd           serve this container as a worker host: sshd (unprivileged, as `trainer`) on
#                  $SSHD_PORT with the host key made for this host name, accepting only the client key.
#   launch ARGS... make keys first when TFLAUNCH_KEYS_FOR names the worker hosts (as `keys` does),
#                  wait until every remote host of the spec (--cluster FILE) accepts connections on
#                  its SSH port, then run `launch ARGS...`.
#   anything else  runs as given.
set -eu
KEYS=${TFLAUNCH_KEYS:-/keys}
WAIT_S=${TFLAUNCH_WAIT_S:-120}
SSHD_PORT=${SSHD_PORT:-2222}

make_keys() {
  [ "$#" -gt 0 ] || { echo "keys: name the worker hosts, e.g. 'keys worker-0 worker-1'" >&2; exit 2; }
  umask 077
  mkdir -p "$KEYS/client" "$KEYS/hosts"
  made=""
  if [ ! -s "$KEYS/client/id_ed25519" ]; then
    ssh-keygen -q -t ed25519 -N '' -C tflaunch-launcher -f "$KEYS/client/id_ed25519"
    cp "$KEYS/client/id_ed25519.pub" "$KEYS/authorized_keys"
    made="a client key"
  fi
  for host in "$@"; do
    if [ ! -s "$KEYS/hosts/$host/ssh_host_ed25519_key.pub" ]; then
      mkdir -p "$KEYS/hosts/$host"
      rm -f "$KEYS/hosts/$host/ssh_host_ed25519_key"
      ssh-keygen -q -t ed25519 -N '' -C "$host" -f "$KEYS/hosts/$host/ssh_host_ed25519_key"
      made="${made:+$made, }a host key for $host"
    fi
  done
  if [ -z "$made" ] && [ -s "$KEYS/known_hosts" ]; then
    echo "keys: $KEYS already holds keys for $*; kept (remove the volume to make new ones)"
    return 0
  fi
  # known_hosts pins every host key made so far; written last and replaced whole: a known_hosts
  # file means the set is complete
  pinned="$KEYS/.known_hosts.partial"
  : > "$pinned"
  for public in "$KEYS"/hosts/*/ssh_host_ed25519_key.pub; do
    host=$(basename "$(dirname "$public")")
    printf '[%s]:%s %s\n' "$host" "$SSHD_PORT" "$(cut -d' ' -f1,2 "$public")" >> "$pinned"
  done
  mv "$pinned" "$KEYS/known_hosts"
  echo "keys: made $made; known_hosts pins the host keys of $(ls "$KEYS/hosts" | tr '\n' ' ')"
}

wait_for_file() {
  waited=0
  until [ -s "$1" ]; do
    if [ "$waited" -ge "$WAIT_S" ]; then
      echo "$2: $1 did not appear within ${WAIT_S}s; make the keys first (role 'keys', or TFLAUNCH_KEYS_FOR on the launcher)" >&2
      exit 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
}

serve_sshd() {
  host=${TFLAUNCH_HOST:-$(hostname)}
  wait_for_file "$KEYS/known_hosts" sshd
  key="$KEYS/hosts/$host/ssh_host_ed25519_key"
  [ -s "$key" ] || { echo "sshd: no host key for '$host' in $KEYS/hosts; name it where the keys are made" >&2; exit 2; }
  umask 077
  mkdir -p "$HOME/.ssh"
  cp "$KEYS/authorized_keys" "$HOME/.ssh/authorized_keys"
  cp "$key" "$HOME/.ssh/ssh_host_ed25519_key"  # sshd refuses a host key that others can read
  touch /tmp/tflaunch-role-sshd
  exec /usr/sbin/sshd -D -e -f /opt/tflaunch/docker/sshd_config -p "$SSHD_PORT" -h "$HOME/.ssh/ssh_host_ed25519_key"
}

wait_for_hosts() {
  python - "$WAIT_S" "$@" <<'PY'
import socket, sys, time
from pathlib import Path

from launcher.errors import LaunchError
from launcher.spec import load_spec

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
  keys) shift; make_keys "$@" ;;
  sshd) serve_sshd ;;
  launch)
    shift
    # shellcheck disable=SC2086 # a list of host names
    if [ -n "${TFLAUNCH_KEYS_FOR:-}" ]; then make_keys $TFLAUNCH_KEYS_FOR; fi
    wait_for_hosts "$@"
    exec launch "$@" ;;
  *) exec "$@" ;;
esac
