#!/usr/bin/env bash
# Make a Docker engine reachable: use the one that answers, else install Debian's docker.io
# when no engine is installed, and start dockerd in the background when it is not running.
set -euo pipefail

engine_up() { docker info >/dev/null 2>&1; }
engine_up && exit 0

if ! command -v dockerd >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "no Docker engine: install docker.io (needs root)" >&2; exit 1; }
  echo "installing the Docker engine (docker.io)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
  engine_up && exit 0
fi

[ "$(id -u)" = 0 ] || { echo "the Docker engine is not running; start it (needs root)" >&2; exit 1; }
echo "starting dockerd in the background (log: /var/log/airlock-dockerd.log)"
nohup dockerd >/var/log/airlock-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  engine_up && exit 0
  sleep 0.5
done
echo "dockerd did not come up; see /var/log/airlock-dockerd.log" >&2
tail -n 20 /var/log/airlock-dockerd.log >&2 || true
exit 1
