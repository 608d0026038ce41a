"""Whatever stdin is, a stdio server whose stdin ends stops promptly with status 0: a pipe the
client closed, an empty file, or a device the loop cannot wait on (``/dev/null``, as systemd's
``StandardInput=null``, ``nohup`` or ``docker run`` without ``-i`` give)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest

from tests.airlock.frontends.mcp_servers import ROOT
from tests.airlock.frontends.test_mcp_stdio import SERVER


@contextmanager
def _dev_null(tmp_path: Path) -> Iterator[IO[bytes]]:
    with open(os.devnull, "rb") as stdin:
        yield stdin


@contextmanager
def _empty_file(tmp_path: Path) -> Iterator[IO[bytes]]:
    (tmp_path / "empty").write_bytes(b"")
    with (tmp_path / "empty").open("rb") as stdin:
        yield stdin


@contextmanager
def _closed_pipe(tmp_path: Path) -> Iterator[int]:
    read, write = os.pipe()
    os.close(write)
    try:
        yield read
    finally:
        os.close(read)


STDINS = {"/dev/null": _dev_null, "an empty file": _empty_file, "a closed pipe": _closed_pipe}


@pytest.mark.parametrize("kind", sorted(STDINS))
def test_a_stdin_that_ends_at_once_ends_the_server(kind: str, tmp_path: Path) -> None:
    with STDINS[kind](tmp_path) as stdin:
        done = subprocess.run(
            [sys.executable, "-c", SERVER],
            stdin=stdin,
            capture_output=True,
            cwd=ROOT,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert b"Traceback" not in done.stderr, done.stderr.decode()[-2000:]
    assert done.stdout == b""
