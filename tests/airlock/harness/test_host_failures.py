"""What the host fails at is answered as the host's: an input that went away or became
unreadable after the session checked it is named by its name (never the operator's host
path, which the log keeps), and an artifact store that cannot take a program's files is a
sandbox failure, never the program's error. A scripted backend checks inputs as the Docker
backend does; the rest runs through a real engine."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from airlock.harness import Harness, Session
from airlock.policies import Principal, SandboxProfile, parse_policy
from airlock.sandbox import DockerBackend, SandboxBackend
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import MemoryAuditStore, Registry
from tests.conftest import IMAGE, LoopThread, require_docker

ANALYST = Principal(user_id="analyst", tenant_id="acme")
POLICY = 'version = 1\n[principals.analyst]\neffects = ["read(file:*)"]\n'
FULL = SandboxProfile(language_mode="full")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def session_over(backend: SandboxBackend, store: Path, **inputs: Path) -> Session:
    harness = Harness(
        Registry(),
        parse_policy(POLICY, source="host-failures-test"),
        backend,
        audit=MemoryAuditStore(),
        artifacts=store,
        profile=FULL,
    )
    return harness.session(ANALYST, inputs=dict(inputs))


def _remove(path: Path) -> None:
    path.unlink()


def _unreadable(path: Path) -> None:
    path.chmod(0o600)


def _linked(path: Path) -> None:
    target = path.with_name("elsewhere.csv")
    path.rename(target)
    path.symlink_to(target)


CHANGES: list[tuple[str, Callable[[Path], None], str]] = [
    ("missing", _remove, "gone"),
    ("unreadable", _unreadable, "not readable"),
    ("link", _linked, "a link now"),
]


@pytest.mark.parametrize(("reason", "change", "said"), CHANGES, ids=[c[0] for c in CHANGES])
@pytest.mark.anyio
async def test_an_input_gone_from_the_host_is_named_never_its_host_path(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    reason: str,
    change: Callable[[Path], None],
    said: str,
) -> None:
    private = tmp_path / "operator-private" / "customers_q3_confidential.csv"
    private.parent.mkdir()
    private.write_text("a,b\n1,2\n")
    private.chmod(0o644)
    backend = ScriptedBackend(lambda program, profile: ok_result(1), profile=FULL)
    session = session_over(backend, tmp_path / "store", **{"customers.csv": private})
    change(private)
    with caplog.at_level(logging.WARNING, logger="airlock.harness"):
        answer = await session.call("execute_code", {"code": "1"})
    body = json.loads(answer.content)
    assert (answer.code, body["input"], body["reason"], answer.retryable) == (
        "input_refused",
        "customers.csv",
        reason,
        False,
    )
    assert f"(it is {said} on the host)" in body["message"]
    assert "tell the user the file 'customers.csv' is not available" in body["message"]
    for secret in ("operator-private", "customers_q3_confidential", str(tmp_path)):
        assert secret not in answer.content
    assert str(private) in caplog.text  # the operator's log keeps the whole message
    assert backend.calls == []  # nothing ran


class Engine:
    def __init__(self, loop: LoopThread, backend: DockerBackend) -> None:
        self.loop = loop
        self.backend = backend


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    require_docker()
    loop = LoopThread()
    backend = DockerBackend(image=IMAGE, profile=FULL, pool_size=0)
    loop.call(backend.start())
    try:
        yield Engine(loop, backend)
    finally:
        loop.call(backend.close())
        loop.stop()
    client = docker.from_env()
    owner = backend._owner  # this backend's containers only: others may share the engine
    left = client.containers.list(all=True, filters={"label": f"{_owner_label()}={owner}"})
    assert left == []


def _owner_label() -> str:
    from airlock.sandbox._owner import OWNER_LABEL

    return OWNER_LABEL


@pytest.mark.docker
def test_an_input_gone_before_a_real_run_is_named_never_its_host_path(
    engine: Engine, tmp_path: Path
) -> None:
    private = tmp_path / "operator-private-sales.csv"
    private.write_text("a,b\n1,2\n")
    private.chmod(0o644)
    session = session_over(engine.backend, tmp_path / "store", **{"sales.csv": private})
    private.unlink()
    answer = engine.loop.call(session.call("execute_code", {"code": "1"}))
    assert (answer.code, json.loads(answer.content)["reason"]) == ("input_refused", "missing")
    assert "operator-private" not in answer.content
    assert str(tmp_path) not in answer.content


def _store_a_file(root: Path) -> Path:
    store = root / "artifacts"
    store.write_text("not a directory")
    return store


@pytest.mark.docker
def test_an_artifact_store_that_cannot_take_the_files_is_the_hosts_failure(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store_a_file(tmp_path)
    session = session_over(engine.backend, store)
    with caplog.at_level(logging.ERROR, logger="airlock.sandbox"):
        answer = engine.loop.call(
            session.call("execute_code", {"code": "open('/out/r.txt', 'w').write('x')\n'done'"})
        )
    body: dict[str, Any] = json.loads(answer.content)
    assert (answer.code, body["reason"], answer.retryable) == (
        "sandbox_unavailable",
        "artifact_store",
        False,
    )
    assert "program_error" not in answer.content
    assert "RunnerDied" not in answer.content
    assert "the host's fault, not the program's" in body["message"]
    assert str(tmp_path) not in answer.content
    [record] = [r for r in caplog.records if r.name == "airlock.sandbox"]
    assert record.levelno == logging.ERROR
    assert str(store) in record.getMessage()
    # A program that leaves nothing in /out still runs.
    clean = engine.loop.call(session.call("execute_code", {"code": "'fine'"}))
    assert json.loads(clean.content)["value"] == "fine"
