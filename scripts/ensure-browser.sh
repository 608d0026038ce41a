#!/usr/bin/env bash
# The approval page's browser test drives a headless Chromium through Playwright (from PyPI),
# pointed at Debian's own chromium: no browser download beyond the Debian packages.
# Installs chromium when it is missing; a no-op when it is there.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-browser: no chromium and no apt-get; install Chromium yourself" >&2
  exit 1
fi
echo "installing chromium (Debian) for the approval page's browser test"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null
