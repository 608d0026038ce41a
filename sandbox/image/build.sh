#!/usr/bin/env bash
# Build the sandbox image. Uses BASE_IMAGE when given; otherwise the official slim Python
# image when it is present or can be pulled; otherwise a Debian base built here with
# debootstrap (for machines that reach package mirrors but no container registry).
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${AIRLOCK_IMAGE:-airlock-sandbox:latest}
DEFAULT_BASE=python:3.11-slim-bookworm
LOCAL_BASE=airlock-base:bookworm
PYTHON=${PYTHON:-.venv/bin/python}
# The guest's packages, at the versions installed on the host: RestrictedPython (the language
# guard) and pyseccomp (libseccomp's binding, for the second seccomp layer).
version() { "$PYTHON" -c "import importlib.metadata as m; print(m.version('$1'))"; }
RESTRICTED_PYTHON=$(version RestrictedPython)
PYSECCOMP=$(version pyseccomp)

if ! ls .build/wheels/restrictedpython-"$RESTRICTED_PYTHON"-*.whl >/dev/null 2>&1 \
  || ! ls .build/wheels/pyseccomp-"$PYSECCOMP"-*.whl >/dev/null 2>&1; then
  rm -rf .build/wheels && mkdir -p .build/wheels
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: -d .build/wheels \
    "RestrictedPython==$RESTRICTED_PYTHON" "pyseccomp==$PYSECCOMP"
fi

build_local_base() {
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
  local root
  root=$(mktemp -d /tmp/airlock-rootfs.XXXXXX)
  echo "building $LOCAL_BASE with debootstrap (about a minute)"
  debootstrap --variant=minbase --include=python3 bookworm "$root" >/dev/null
  rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/* \
    "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import - "$LOCAL_BASE" >/dev/null
  rm -rf "$root"
}

BASE=${BASE_IMAGE:-}
if [ -z "$BASE" ]; then
  if docker image inspect "$DEFAULT_BASE" >/dev/null 2>&1 || timeout 60 docker pull -q "$DEFAULT_BASE" >/dev/null 2>&1; then
    BASE=$DEFAULT_BASE
  else
    docker image inspect "$LOCAL_BASE" >/dev/null 2>&1 || build_local_base
    BASE=$LOCAL_BASE
  fi
fi

echo "building $IMAGE from $BASE"
DOCKER_BUILDKIT=0 docker build --quiet -f Dockerfile.sandbox --build-arg "BASE_IMAGE=$BASE" -t "$IMAGE" . >/dev/null
docker image inspect -f '{{.Id}}' "$IMAGE"
