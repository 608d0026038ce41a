#!/usr/bin/env bash
# PostgreSQL's server binaries for the tests and the write benchmark, from Debian's packages:
# they start a throwaway server of their own (tests/postgres.py), so no cluster is created
# and nothing is left running. Debian puts the binaries in /usr/lib/postgresql/NN/bin.
set -euo pipefail

if compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null && id postgres >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "PostgreSQL is not installed; as root: apt-get install postgresql" >&2
  exit 1
fi
echo "installing PostgreSQL (Debian's postgresql)"
# Only the binaries are wanted: no 'main' cluster started at install time.
mkdir -p /etc/postgresql-common
if ! grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf; then
  echo "create_main_cluster = false" >>/etc/postgresql-common/createcluster.conf
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || {
  echo "postgresql installed, but no /usr/lib/postgresql/*/bin/pg_ctl" >&2
  exit 1
}
