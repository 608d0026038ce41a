#!/usr/bin/env bash
# Build the data image (Dockerfile.data) on the sandbox image: numpy, pandas, pyarrow and
# matplotlib, at the versions airlock.sandbox.DATA_PACKAGES names. Their wheels (for the
# image's Python 3.11 and this machine's architecture) are downloaded on the host into
# .build/wheels-data and copied in; the build itself needs no network.
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${AIRLOCK_DATA_IMAGE:-airlock-sandbox-data:latest}
BASE=${AIRLOCK_IMAGE:-airlock-sandbox:latest}
PYTHON=${PYTHON:-.venv/bin/python}
WHEELS=.build/wheels-data

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  AIRLOCK_IMAGE=$BASE PYTHON=$PYTHON sandbox/image/build.sh >/dev/null
fi

# sandbox/_images.py holds the list and imports nothing but the standard library: read on its
# own, it needs no installed airlock.
IMAGES=sandbox/_images.py
PINS=$("$PYTHON" -c 'import runpy, sys; print(runpy.run_path(sys.argv[1])["packages_text"](runpy.run_path(sys.argv[1])["DATA_PACKAGES"]))' "$IMAGES")
ARCH=$(uname -m)
if [ "$(cat "$WHEELS/.pins" 2>/dev/null)" != "$PINS" ]; then
  echo "downloading the data image's wheels ($ARCH, Python 3.11)"
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  # shellcheck disable=SC2086  # one argument per pin
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: -d "$WHEELS" \
    --python-version 3.11 --implementation cp --abi cp311 \
    --platform "manylinux_2_28_$ARCH" --platform "manylinux_2_17_$ARCH" \
    --platform "manylinux2014_$ARCH" $PINS
  echo "$PINS" > "$WHEELS/.pins"
fi

"$PYTHON" - "$IMAGES" > .build/image-data.json <<'PY'
import json, runpy, sys
images = runpy.run_path(sys.argv[1])
json.dump({"image": "data", "packages": dict(images["DATA_PACKAGES"]),
           "warm_imports": list(images["DATA_IMPORTS"]),
           "matplotlib_cache": "/opt/airlock/mpl"}, sys.stdout, indent=2, sort_keys=True)
PY

echo "building $IMAGE from $BASE"
DOCKER_BUILDKIT=0 docker build --quiet -f Dockerfile.data --build-arg "BASE_IMAGE=$BASE" \
  --label "io.airlock.image=data" --label "io.airlock.packages=$PINS" -t "$IMAGE" . >/dev/null
docker image inspect -f '{{.Id}}' "$IMAGE"
