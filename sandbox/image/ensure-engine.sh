#!/usr/bin/env bash
# Make a Docker engine reachable: use the one that answers, else install Debian's docker.io
# when no engine is installed, and start dockerd in the background when it is not running.
# Then make gVisor's `runsc` (Debian's runsc package) a runtime of that engine: installed,
# registered in /etc/docker/daemon.json (merged with what is there), and loaded by dockerd
# (SIGHUP when it runs; read at start when it does not).
set -euo pipefail

DAEMON_JSON=${AIRLOCK_DAEMON_JSON:-/etc/docker/daemon.json}
# --network=none: a `--network none` container starts under gVisor; --host-uds=open: the
# bridge's host Unix socket in a bind mount is reachable from inside; --oci-seccomp: gVisor
# enforces the container's seccomp profile too (the same outer layer as under runc).
RUNSC_ARGS='["--platform=ptrace", "--network=none", "--host-uds=open", "--oci-seccomp"]'

engine_up() { docker info >/dev/null 2>&1; }
runsc_registered() {
  # Registered with the arguments above, not merely by name.
  docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
runsc = json.load(sys.stdin).get("runsc") or {}
sys.exit(0 if runsc.get("runtimeArgs") == json.loads(sys.argv[1]) else 1)' "$RUNSC_ARGS"
}
is_root() { [ "$(id -u)" = 0 ]; }

install_runsc() {
  command -v runsc >/dev/null && return 0
  echo "installing gVisor (runsc)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get install -y -qq runsc >/dev/null
}

register_runsc() {
  # Merge, never overwrite: other runtimes and settings in daemon.json stay as they are.
  mkdir -p "$(dirname "$DAEMON_JSON")"
  python3 - "$DAEMON_JSON" "$(command -v runsc)" "$RUNSC_ARGS" <<'EOF'
import json, pathlib, sys
path, binary, args = pathlib.Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
config = json.loads(path.read_text() or "{}") if path.exists() else {}
config.setdefault("runtimes", {})["runsc"] = {"path": binary, "runtimeArgs": args}
path.write_text(json.dumps(config, indent=2) + "\n")
EOF
}

ensure_runsc() {
  runsc_registered && return 0
  if ! is_root; then
    # runc still works; the runsc tests skip (and fail under CI=true).
    echo "warning: gVisor (runsc) is not registered with dockerd; run this as root" >&2
    return 0
  fi
  install_runsc
  register_runsc
  if engine_up; then
    echo "reloading dockerd's configuration (SIGHUP) to register runsc"
    kill -HUP "$(pidof dockerd)"
    for _ in $(seq 1 40); do
      runsc_registered && return 0
      sleep 0.25
    done
    echo "dockerd did not register runsc; check $DAEMON_JSON" >&2
    return 1
  fi
}

start_engine() {
  if ! command -v dockerd >/dev/null; then
    is_root || { echo "no Docker engine: install docker.io (needs root)" >&2; exit 1; }
    echo "installing the Docker engine (docker.io)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
    engine_up && return 0
  fi
  is_root || { echo "the Docker engine is not running; start it (needs root)" >&2; exit 1; }
  # Registered before dockerd starts, so it reads runsc with the rest of its configuration.
  install_runsc
  register_runsc
  echo "starting dockerd in the background (log: /var/log/airlock-dockerd.log)"
  nohup dockerd >/var/log/airlock-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    engine_up && return 0
    sleep 0.5
  done
  echo "dockerd did not come up; see /var/log/airlock-dockerd.log" >&2
  tail -n 20 /var/log/airlock-dockerd.log >&2 || true
  exit 1
}

engine_up || start_engine
ensure_runsc
