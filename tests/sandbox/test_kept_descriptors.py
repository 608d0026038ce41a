"""Nothing a program sets on its ``/dev/null`` descriptors reaches the next program.

A kept or reused container's programs run in processes forked from one runner, whose stdin,
stdout and stderr lead to ``/dev/null``. Forked as they were, every program's descriptors 0, 1
and 2 (and the copies its output capture keeps) were one open file description, the runner's:
flags a program set there (``F_SETFL``'s ``O_NONBLOCK`` and ``O_APPEND``, ``F_SETSIG``'s
signal, ``F_SETOWN``'s owner) were read back by the next program, a channel between them even
with nothing kept. Each program's process now opens ``/dev/null`` afresh. In a real kept
container, keeping names and clean, under each runtime.
"""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator

import pytest

from airlock.sandbox import DockerBackend
from tests.bridge.records import ALICE
from tests.sandbox.runtimes import RUNTIMES, started_backend

_NULLS = textwrap.dedent("""
    import fcntl, os
    nulls = []
    for entry in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            if os.readlink(f"/proc/self/fd/{entry}") == "/dev/null":
                nulls.append(int(entry))
        except OSError:
            pass
""")
F_SETSIG, F_GETSIG = 10, 11
FLAGS: list[tuple[str, str, str, object]] = [
    (
        "F_SETFL O_NONBLOCK|O_APPEND",
        "fcntl.fcntl(fd, fcntl.F_SETFL, os.O_NONBLOCK | os.O_APPEND)",
        "fcntl.fcntl(fd, fcntl.F_GETFL) & (os.O_NONBLOCK | os.O_APPEND)",
        0,
    ),
    ("F_SETSIG", f"fcntl.fcntl(fd, {F_SETSIG}, 42)", f"fcntl.fcntl(fd, {F_GETSIG})", 0),
    ("F_SETOWN", "fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())", "fcntl.fcntl(fd, fcntl.F_GETOWN)", 0),
]  # fmt: skip
"""What a program sets on a descriptor, how the next reads it back, and what it reads: the
value of a ``/dev/null`` opened afresh."""


def _setter(setting: str) -> str:
    return _NULLS + textwrap.dedent(f"""
        for fd in nulls:
            try:
                {setting}
            except OSError:
                pass  # (a runtime without it: nothing to carry)
        len(nulls)
    """)


def _reader(reading: str) -> str:
    return _NULLS + textwrap.dedent(f"""
        seen = []
        for fd in nulls:
            try:
                seen.append({reading})
            except OSError:
                pass
        [fd in nulls for fd in (0, 1, 2)], sorted(set(seen))
    """)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=RUNTIMES)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[DockerBackend]:
    async with started_backend(request.param, timeout_s=8.0) as started:
        yield started


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("clean", [False, True], ids=["keeping names", "clean"])
@pytest.mark.parametrize(
    ("setting", "reading", "default"), [c[1:] for c in FLAGS], ids=[c[0] for c in FLAGS]
)
async def test_flags_a_program_sets_on_dev_null_do_not_reach_the_next(
    backend: DockerBackend, clean: bool, setting: str, reading: str, default: object
) -> None:
    kept_sandbox = backend.keep(ALICE, idle_timeout=60, clean=clean)
    try:
        first = await kept_sandbox.run(_setter(setting))
        second = await kept_sandbox.run(_reader(reading))
    finally:
        await kept_sandbox.close()

    assert first.status == "ok", first
    assert first.value >= 1, first  # (stdin at least)
    # stdin leads to /dev/null (stdout and stderr to the capture's pipes), as it did.
    assert second.status == "ok", second
    assert second.value == [[True, False, False], [default]], second
    assert kept_sandbox.starts == 1
