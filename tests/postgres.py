"""A throwaway PostgreSQL server on loopback, for the tests and the write benchmark.

:class:`ThrowawayPostgres` runs Debian's binaries (``/usr/lib/postgresql/NN/bin``, the newest
version installed; ``scripts/ensure-postgres.sh`` installs them): ``initdb`` into a fresh
temporary directory, ``pg_ctl start`` on a free port of 127.0.0.1 with its Unix socket in that
directory, and on :meth:`stop` ``pg_ctl stop`` and the directory removed. PostgreSQL refuses to
run as root, so as root the server runs as the ``postgres`` user (``runuser``), which owns the
directory. Authentication is ``trust`` on loopback only: the server is reachable from this
machine, for as long as the tests run.

The ``postgres_url`` fixture (session scope) starts one, or uses ``AIRLOCK_TEST_DATABASE_URL``
when set; each test gets a schema of its own (:func:`fresh_schema`). When no server can be
started the tests that need one fail under ``CI=true`` and are skipped elsewhere, like the
Docker tests.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.ports import free_port

__all__ = [
    "ThrowawayPostgres",
    "fresh_schema",
    "postgres_bin",
    "postgres_problem",
    "postgres_url",
    "require_postgres",
]

_USER = "airlock"
_RUN_AS = "postgres"


def postgres_bin() -> Path | None:
    """The folder of the newest installed PostgreSQL's server binaries, if any."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


class ThrowawayPostgres:
    """One PostgreSQL server in a temporary directory; :meth:`start`, then :attr:`url`.

    ``durable=False`` (for tests) turns ``fsync`` off: a crash of the machine may lose the
    database, which a throwaway one does not mind. Benchmarks keep it on, as a real server.
    """

    def __init__(self, *, durable: bool = False, max_connections: int = 200) -> None:
        self.durable = durable
        self.max_connections = max_connections
        self.port = 0
        self.dir: Path | None = None

    @property
    def url(self) -> str:
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/postgres"

    def _run(self, argv: list[str], *, timeout: float = 60) -> None:
        as_root = os.geteuid() == 0
        command = ["runuser", "-u", _RUN_AS, "--", *argv] if as_root else argv
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv[:2])} failed ({done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-2000:]}"
            )

    def start(self) -> ThrowawayPostgres:
        """Create the data directory and start the server; wait until it answers.

        Raises:
            RuntimeError: no PostgreSQL is installed, or it did not start.
        """
        bindir = postgres_bin()
        if bindir is None:
            raise RuntimeError(
                "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/pg_ctl): "
                "run scripts/ensure-postgres.sh"
            )
        self.dir = Path(tempfile.mkdtemp(prefix="airlock-pg-"))
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam(_RUN_AS)
            except KeyError:
                raise RuntimeError(
                    f"PostgreSQL refuses to run as root and there is no {_RUN_AS!r} user: "
                    "run scripts/ensure-postgres.sh"
                ) from None
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        data = self.dir / "data"
        self._run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                _USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ]
        )
        self.port = free_port()
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-c port={self.port}",
            f"-c unix_socket_directories={self.dir}",
            f"-c max_connections={self.max_connections}",
            "-c shared_buffers=64MB",
        ]
        if not self.durable:
            options += ["-c fsync=off", "-c full_page_writes=off"]
        self._run(
            [
                str(bindir / "pg_ctl"),
                "start",
                "-D",
                str(data),
                "-l",
                str(self.dir / "server.log"),
                "-w",
                "-t",
                "60",
                "-o",
                " ".join(options),
            ],
            timeout=90,
        )
        self._wait()
        self._watch(bindir, data)
        return self

    def _watch(self, bindir: Path, data: Path) -> None:
        # Should this process die without stopping the server (killed, timed out), a
        # watcher stops it and removes its folder, so nothing is left running.
        assert self.dir is not None
        script = (
            f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 2; done; "
            f"if [ -d {data} ]; then "
            f"runuser -u {_RUN_AS} -- {bindir / 'pg_ctl'} stop -D {data} -m immediate "
            f"|| {bindir / 'pg_ctl'} stop -D {data} -m immediate; rm -rf {self.dir}; fi"
        )
        if os.geteuid() != 0:
            script = script.replace(f"runuser -u {_RUN_AS} -- ", "")
        subprocess.Popen(
            ["bash", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _wait(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (fast: nothing in it needs to survive) and remove its directory."""
        if self.dir is None:
            return
        bindir = postgres_bin()
        if bindir is not None and (self.dir / "data" / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._run(
                    [str(bindir / "pg_ctl"), "stop", "-D", str(self.dir / "data"), "-m", "fast"]
                )
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


def fresh_schema(url: str, prefix: str = "t") -> str:
    """Create an empty schema in the database at ``url`` and return a URL whose connections
    use it (``search_path``): each test's tables are its own."""
    import psycopg

    name = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}options={quote(f'-csearch_path={name}')}"


def postgres_problem() -> str | None:
    """Why the PostgreSQL tests cannot run here, or ``None``."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ModuleNotFoundError as exc:
        return f"the postgres extra is not installed ({exc.name}): pip install -e '.[dev]'"
    if os.environ.get("AIRLOCK_TEST_DATABASE_URL"):
        return None
    if postgres_bin() is None:
        return "PostgreSQL is not installed: run scripts/ensure-postgres.sh"
    return None


def require_postgres(problem: str | None) -> None:
    """Fail under CI=true, skip elsewhere, when there is no PostgreSQL to test against."""
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem} (CI=true: the PostgreSQL tests must run, not skip)")
    pytest.skip(f"{problem} (set CI=true to fail instead)")


_started: list[str] = []


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a PostgreSQL server for this test session: ``AIRLOCK_TEST_DATABASE_URL``, or
    a throwaway one started here and stopped at the end."""
    require_postgres(postgres_problem())
    given = os.environ.get("AIRLOCK_TEST_DATABASE_URL")
    if given:
        yield given
        return
    server = ThrowawayPostgres()
    try:
        server.start()
    except Exception as exc:
        server.stop()
        require_postgres(f"a throwaway PostgreSQL did not start: {exc}")
        raise
    try:
        yield server.url
    finally:
        server.stop()
