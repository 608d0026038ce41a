#!/usr/bin/env bash
# Make a Docker engine reachable: use the one that answers, else install Debian's docker.io
# when no engine is installed, and start dockerd in the background when it is not running.
# Then make gVisor's `runsc` and `crun` (Debian's runsc and crun packages) runtimes of that
# engine: installed, registered in /etc/docker/daemon.json (merged with what is there), and
# loaded by dockerd (SIGHUP when it runs and the file changed; read at start when it does
# not). crun is the runc-class runtime a profile's `runtime = "crun"` chooses: it starts a
# container with less CPU than runc (SECURITY.md).
set -euo pipefail

DAEMON_JSON=${AIRLOCK_DAEMON_JSON:-/etc/docker/daemon.json}
# --network=none: a `--network none` container starts under gVisor; --host-uds=open: the
# bridge's host Unix socket in a bind mount is reachable from inside; --oci-seccomp: gVisor
# enforces the container's seccomp profile too (the same outer layer as under runc).
RUNSC_ARGS='["--platform=ptrace", "--network=none", "--host-uds=open", "--oci-seccomp"]'

engine_up() { docker info >/dev/null 2>&1; }
runtimes_registered() {
  # Both registered, runsc with the arguments above, not merely by name.
  docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
runtimes = json.load(sys.stdin)
runsc = runtimes.get("runsc") or {}
sys.exit(0 if runsc.get("runtimeArgs") == json.loads(sys.argv[1]) and "crun" in runtimes else 1)
' "$RUNSC_ARGS"
}
is_root() { [ "$(id -u)" = 0 ]; }

install_runtimes() {
  command -v runsc >/dev/null && command -v crun >/dev/null && return 0
  echo "installing gVisor (runsc) and crun"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get install -y -qq runsc crun \
    >/dev/null
}

register_runtimes() {
  # Merge, never overwrite: other runtimes and settings in daemon.json stay as they are.
  mkdir -p "$(dirname "$DAEMON_JSON")"
  python3 - "$DAEMON_JSON" "$(command -v runsc)" "$RUNSC_ARGS" "$(command -v crun)" <<'EOF'
import json, pathlib, sys
path, runsc, args, crun = pathlib.Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
config = json.loads(path.read_text() or "{}") if path.exists() else {}
runtimes = config.setdefault("runtimes", {})
runtimes["runsc"] = {"path": runsc, "runtimeArgs": args}
runtimes["crun"] = {"path": crun}
path.write_text(json.dumps(config, indent=2) + "\n")
EOF
}

hybrid_controllers() {
  # Controllers left on the cgroup v2 hierarchy of a host that mounts cgroup v1 under
  # /sys/fs/cgroup and v2 beside it at /sys/fs/cgroup/unified ("hybrid"): none on a pure v1
  # or a pure v2 host.
  local unified=/sys/fs/cgroup/unified/cgroup.controllers
  [ -r "$unified" ] && [ -d /sys/fs/cgroup/memory ] && cat "$unified"
  return 0
}

ensure_crun_cgroups() {
  # crun refuses to start a container on a hybrid host whose v2 hierarchy holds controllers
  # ("cgroups in hybrid mode not supported, drop all controllers from cgroupv2"); runc does
  # not mind. Give each such controller (hugetlb, here) a v1 hierarchy of its own, where
  # runc and crun both use it the way they use every other v1 controller. Not persistent
  # across boots: this runs before every test run.
  local controllers controller
  controllers=$(hybrid_controllers)
  [ -n "$controllers" ] || return 0
  if ! is_root; then
    echo "warning: crun cannot start containers here (cgroup v2 holds: $controllers);" \
      "run this as root" >&2
    return 0
  fi
  for controller in $controllers; do
    echo "mounting the $controller cgroup controller as a v1 hierarchy (for crun)"
    mkdir -p "/sys/fs/cgroup/$controller"
    mount -t cgroup -o "$controller" cgroup "/sys/fs/cgroup/$controller" ||
      echo "warning: could not move $controller off cgroup v2; crun will not start" >&2
  done
}

ensure_runtimes() {
  ensure_crun_cgroups
  # Nothing to do (and no reload) when dockerd already has both as configured here.
  runtimes_registered && return 0
  if ! is_root; then
    # runc still works; the runsc and crun tests skip (and fail under CI=true).
    echo "warning: runsc and crun are not registered with dockerd; run this as root" >&2
    return 0
  fi
  install_runtimes
  register_runtimes
  if engine_up; then
    echo "reloading dockerd's configuration (SIGHUP) to register runsc and crun"
    kill -HUP "$(pidof dockerd)"
    for _ in $(seq 1 40); do
      runtimes_registered && return 0
      sleep 0.25
    done
    echo "dockerd did not register runsc and crun; check $DAEMON_JSON" >&2
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
  # Registered before dockerd starts, so it reads them with the rest of its configuration.
  install_runtimes
  register_runtimes
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
ensure_runtimes
