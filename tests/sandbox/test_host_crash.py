"""A host process that dies (or stops) mid-run: the container ends its program by itself.

The host enforces a run's deadline by destroying the container; a host killed mid-run cannot.
The runner then exits as the bridge closes (a kept container's zygote likewise), and a host
that stays connected but does nothing is outlived by the run frame's ``deadline_s``: a
one-program runner exits then, a kept container's zygote ends the program's processes (the
container, with the zygote alone, waits on for its host). No other
backend starts meanwhile, and none could remove the container: its owner labels name this
test's process, alive throughout, so no other process's reaper of orphans touches it.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import time

import docker
import pytest

from airlock.sandbox._owner import LABEL, OWNER_LABEL
from tests.conftest import IMAGE, require_docker

pytestmark = pytest.mark.docker

TIMEOUT_S = 3.0
MARGIN_S = 2.0
"""The guest's margin past the deadline in this test's host (the library's is
:data:`~airlock.sandbox._container._GUEST_MARGIN_S`): what is tested is that the guest keeps
the run frame's ``deadline_s``, whatever it is."""
SPIN = "x = 0\nwhile True:\n    x += 1\n"
SLEEP = "import time\ntime.sleep(120)\n"
BACKTRACK = "import re\nre.match('(a*)*b', 'a' * 40)\n"
"""One call into C, holding the interpreter lock for hours: no Python thread runs meanwhile."""

# The host: a backend whose containers carry this test process's owner labels, which prints
# the owner label, then "go" as it hands the program over.
_HOST = textwrap.dedent("""
    import asyncio, os, sys
    from airlock.policies import Principal, SandboxProfile
    from airlock.sandbox import DockerBackend, _container, _docker, _owner

    labels = _owner.owner_labels(os.getppid())
    _docker.owner_labels = lambda: labels
    _container._GUEST_MARGIN_S = {margin}  # (the guest's deadline sooner: the test is shorter)
    program, mode, keep = sys.argv[1], sys.argv[2], sys.argv[3] == "keep"

    async def main():
        profile = SandboxProfile(timeout_s={timeout}, language_mode=mode)
        async with DockerBackend(image={image!r}, profile=profile) as backend:
            print(labels[_owner.OWNER_LABEL], flush=True)
            if keep:
                kept = backend.keep(Principal(user_id="u1", tenant_id="t1"))
                await kept.run("1")
                print("go", flush=True)
                await kept.run(program)
            else:
                print("go", flush=True)
                await backend.run(program)

    asyncio.run(main())
""").format(timeout=TIMEOUT_S, image=IMAGE, margin=MARGIN_S)

STOPPED_S = TIMEOUT_S + MARGIN_S + 10
"""A stopped host's program ends by its guest deadline: the latest it may run after the stop."""

# (case, program, mode, kept, what happens to the host, what must end: the container or (a
#  kept one's zygote waits on) the program's processes, the latest it may still run after that
#  (s))
CRASHES = [
    ("spin_host_killed", SPIN, "restricted", False, signal.SIGKILL, "container", TIMEOUT_S + 5),
    ("sleep_host_killed", SLEEP, "full", False, signal.SIGKILL, "container", TIMEOUT_S + 5),
    ("kept_spin_host_killed", SPIN, "restricted", True, signal.SIGKILL, "container", TIMEOUT_S + 5),
    ("spin_host_stopped", SPIN, "restricted", False, signal.SIGSTOP, "container", STOPPED_S),
    ("kept_spin_host_stopped", SPIN, "restricted", True, signal.SIGSTOP, "program", STOPPED_S),
    ("kept_c_call_host_stopped", BACKTRACK, "full", True, signal.SIGSTOP, "program", STOPPED_S),
]


def _running(client: docker.DockerClient, owner: str, ends: str = "container") -> list[str]:
    """The owner's running containers; for ``ends="program"``, those running more than one
    process (a kept container's zygote alone is no program)."""
    entries = client.api.containers(filters={"label": [f"{OWNER_LABEL}={owner}"]})
    ids = [str(entry["Id"]) for entry in entries]
    if ends == "program":
        ids = [cid for cid in ids if len(_processes(client, cid)) > 1]
    return [cid[:12] for cid in ids]


def _processes(client: docker.DockerClient, container_id: str) -> list[object]:
    try:
        return list(client.api.top(container_id).get("Processes") or [])
    except docker.errors.APIError:  # it stopped meanwhile
        return []


@pytest.mark.parametrize(
    ("case", "program", "mode", "kept", "happens", "ends", "within_s"),
    CRASHES,
    ids=[row[0] for row in CRASHES],
)
def test_the_program_ends_with_its_host(
    case: str,
    program: str,
    mode: str,
    kept: bool,
    happens: signal.Signals,
    ends: str,
    within_s: float,
) -> None:
    require_docker()
    client = docker.from_env()
    host = subprocess.Popen(
        [sys.executable, "-c", _HOST, program, mode, "keep" if kept else "once"],
        stdout=subprocess.PIPE,
        text=True,
    )
    owner = ""
    try:
        assert host.stdout is not None
        owner = host.stdout.readline().strip()
        assert host.stdout.readline().strip() == "go", f"{case}: the host did not start"
        time.sleep(1.5)  # the program runs
        assert _running(client, owner, ends), f"{case}: no container runs the program"
        host.send_signal(happens)
        began = time.monotonic()
        while _running(client, owner, ends) and time.monotonic() - began < within_s:
            time.sleep(0.5)
        left = _running(client, owner, ends)
        assert not left, f"{case}: {left} still run {within_s} s after the host got {happens!r}"
    finally:
        host.kill()
        host.wait()
        if owner:
            for entry in client.api.containers(
                all=True, filters={"label": [LABEL, f"{OWNER_LABEL}={owner}"]}
            ):
                with contextlib.suppress(docker.errors.APIError):
                    client.api.remove_container(entry["Id"], force=True)
