"""A session's files: inputs the grant must cover (refused before any container starts),
artifacts that come back as references and never as content, and what the model is told.

The refusals need no Docker (a scripted backend records that nothing ran); the artifacts and
the error messages are checked through real containers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airlock.frontends import ToolCall, render_result
from airlock.harness import ArtifactStore, Harness, ModelResult
from airlock.policies import Policy, Principal, SandboxProfile, parse_policy
from airlock.sandbox import DockerBackend, InputRefused, RunResult
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import MemoryAuditStore, Registry
from tests.conftest import IMAGE, LoopThread, require_docker

ANALYST = Principal(user_id="analyst", tenant_id="acme")
GUEST = Principal(user_id="guest", tenant_id="acme")

POLICY = """
version = 1

[principals.analyst]
effects = ["read(file:sales.csv)", "read(file:reports)"]

[principals.guest]
effects = ["read(billing:invoice/*)"]
"""


def policy() -> Policy:
    return parse_policy(POLICY, source="data-session-test")


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    made: dict[str, Path] = {}
    for name in ("sales.csv", "salaries.csv"):
        path = tmp_path / name
        path.write_text("region,amount\nnorth,1\n")
        path.chmod(0o644)
        made[name] = path
    return made


def body(result: ModelResult) -> dict[str, Any]:
    parsed = json.loads(result.content)
    assert isinstance(parsed, dict)
    return parsed


def scripted(tmp_path: Path) -> tuple[Harness, ScriptedBackend]:
    # Inputs need the full language mode: a restricted program cannot open files.
    backend = ScriptedBackend(
        lambda program, profile: ok_result(1), profile=SandboxProfile(language_mode="full")
    )
    harness = Harness(
        Registry(), policy(), backend, audit=MemoryAuditStore(), artifacts=tmp_path / "store"
    )
    return harness, backend


def test_a_session_input_outside_the_grant_is_refused_when_the_session_opens(
    tmp_path: Path, inputs: dict[str, Path]
) -> None:
    harness, backend = scripted(tmp_path)
    with pytest.raises(InputRefused) as raised:
        harness.session(GUEST, inputs={"sales.csv": inputs["sales.csv"]})
    assert raised.value.reason == "grant"
    assert "read(file:sales.csv)" in str(raised.value)
    with pytest.raises(InputRefused, match=r"read\(file:salaries\.csv\)"):
        harness.session(ANALYST, inputs=inputs)  # one of the two is not granted
    assert backend.calls == []


@pytest.mark.anyio
async def test_an_input_outside_the_grant_is_denied_before_any_container_starts(
    tmp_path: Path, inputs: dict[str, Path]
) -> None:
    harness, backend = scripted(tmp_path)
    session = harness.session(ANALYST)
    result = await session.execute_code("1", inputs={"salaries.csv": inputs["salaries.csv"]})
    assert (result.code, result.is_error) == ("denied", True)
    assert body(result)["effect"] == "read(file:salaries.csv)"
    assert backend.calls == []  # nothing ran, nothing was started
    events = harness.audit.events(run_id=session.run_id)
    [refusal] = [e for e in events if e.decision == "deny"]
    assert (refusal.tool, refusal.stage, refusal.code) == ("execute_code", "authorize", "denied")
    assert refusal.effects == ("read(file:salaries.csv)",)
    granted = await session.execute_code("1", inputs={"sales.csv": inputs["sales.csv"]})
    assert granted.code is None
    assert [i.name for i in backend.inputs[-1]] == ["sales.csv"]
    program = [e for e in harness.audit.events(run_id=session.run_id) if e.stage == "done"]
    assert program[-1].effects == ("read(file:sales.csv)",)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_session_inputs_are_offered_to_every_program_and_listed_to_the_model(
    tmp_path: Path, inputs: dict[str, Path]
) -> None:
    harness, backend = scripted(tmp_path)
    session = harness.session(ANALYST, inputs={"sales.csv": inputs["sales.csv"]})
    description = session.tools()[0].description
    assert "/data/sales.csv (22 bytes)" in description
    assert "/out" in description
    await session.call("execute_code", {"code": "1"})
    assert [i.name for i in backend.inputs[-1]] == ["sales.csv"]
    with pytest.raises(InputRefused, match="the session's already"):
        await session.execute_code("1", inputs={"sales.csv": inputs["salaries.csv"]})


@pytest.mark.anyio
async def test_a_session_budget_used_up_says_the_budget_and_the_amount(tmp_path: Path) -> None:
    from airlock.harness import Budget

    harness, _ = scripted(tmp_path)
    session = harness.session(ANALYST, budget=Budget(calls=1))
    await session.call("execute_code", {"code": "1"})
    refused = await session.call("execute_code", {"code": "1"})
    assert refused.code == "limit_exceeded"
    assert "budget of 1 tool calls is used up (1 made)" in body(refused)["message"]


@dataclass
class Docker:
    """A started backend on its own loop, and where artifacts are stored."""

    loop: LoopThread
    backend: DockerBackend
    root: Path

    def call(self, code: str, **profile: Any) -> ModelResult:
        """One ``execute_code`` call of a new session under a full-mode ``profile``."""
        chosen = SandboxProfile.model_validate({"language_mode": "full", **profile})
        harness = Harness(
            Registry(),
            policy(),
            self.backend,
            audit=MemoryAuditStore(),
            artifacts=self.root / "store",
            profile=chosen,
        )
        session = harness.session(ANALYST)
        return self.loop.call(session.call("execute_code", {"code": code}))


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    require_docker()
    loop = LoopThread()
    backend = DockerBackend(image=IMAGE, profile=SandboxProfile(language_mode="full"))
    loop.call(backend.start())
    try:
        yield Docker(loop, backend, tmp_path_factory.mktemp("data-session"))
    finally:
        loop.call(backend.close())
        loop.stop()


@pytest.mark.docker
def test_artifacts_are_references_in_the_model_result_never_content(docker: Docker) -> None:
    root = docker.root
    result = docker.call(
        "open('/out/big.txt', 'w').write('SECRET-CONTENT ' * 20000)\n"
        "open('/out/chart.svg', 'w').write('<svg>SECRET-CONTENT</svg>')\n"
        "'written'",
    )
    assert result.code is None, result.content
    content = result.content
    assert "SECRET-CONTENT" not in content
    assert len(content.encode()) < 2000
    answer = body(result)
    assert answer["value"] == "written"
    listed = {a["name"]: a for a in answer["artifacts"]}
    assert sorted(listed) == ["big.txt", "chart.svg"]
    assert listed["big.txt"]["size_bytes"] == 15 * 20000
    assert listed["chart.svg"]["media_type"] == "image/svg+xml"
    assert listed["big.txt"]["uri"].startswith("airlock://artifacts/run_")
    assert Path(listed["big.txt"]["path"]).is_relative_to(root / "store")
    assert [ref.name for ref in result.artifacts] == ["big.txt", "chart.svg"]
    for provider in ("anthropic", "openai_responses", "openai_chat"):
        block = ToolCall(provider=provider, call_id="c1", name="execute_code", arguments={})
        rendered = json.dumps(render_result(block, result))
        assert "SECRET-CONTENT" not in rendered
        assert listed["big.txt"]["uri"] in rendered  # the result says where they are
    run = Path(listed["big.txt"]["path"]).parent.name
    stored = ArtifactStore(root / "store").list(run.split("-")[0])
    assert {ref.uri for ref in stored} >= {a["uri"] for a in listed.values()}


@pytest.mark.docker
def test_limit_errors_state_the_limit_and_the_amount(docker: Docker) -> None:
    memory = docker.call(
        "blocks = []\nwhile True:\n    blocks.append(bytearray(16 * 2**20))\n",
        memory_bytes=64 * 2**20,
    )
    assert memory.code == "limit_exceeded"
    said = body(memory)
    assert said["limit"] == "memory"
    assert "the limit is 64.0 MiB" in said["message"]
    assert "used" in said["message"] or "ran out" in said["message"]
    slow = docker.call("import time\ntime.sleep(30)\n", timeout_s=1.0)
    assert body(slow)["limit"] == "timeout"
    assert "deadline of 1 s" in body(slow)["message"]
    files = docker.call(
        "for n in range(3):\n    open(f'/out/{n}.txt', 'w').write('x')\n",
        artifact_limit_files=2,
    )
    assert body(files)["limit"] == "artifacts"
    assert "left 3 files in /out; the limit is 2 files" in body(files)["message"]


@pytest.mark.docker
def test_a_misplaced_top_level_statement_is_a_program_error_with_its_line(
    docker: Docker,
) -> None:
    result = docker.call("total = 1\nreturn total\n")
    said = body(result)
    assert (result.code, said["type"], said["line"]) == ("program_error", "SyntaxError", 2)
    awaited = docker.call("import asyncio\nawait asyncio.sleep(0)\n'awaited'")
    assert body(awaited)["value"] == "awaited"


def test_a_scripted_run_result_carries_no_artifacts_by_default() -> None:
    assert (
        RunResult.model_validate(
            {"status": "ok", "exit_status": 0, "has_value": False, "duration_s": 0.0}
        ).artifacts
        == ()
    )


@pytest.mark.docker
def test_a_session_that_keeps_state_keeps_its_inputs_and_each_programs_artifacts(
    docker: Docker, inputs: dict[str, Path]
) -> None:
    harness = Harness(
        Registry(),
        policy(),
        docker.backend,
        audit=MemoryAuditStore(),
        artifacts=docker.root / "kept",
        profile=SandboxProfile(language_mode="full"),
    )
    session = harness.session(ANALYST, keep_state=True, inputs={"sales.csv": inputs["sales.csv"]})
    try:
        first = docker.loop.call(
            session.call(
                "execute_code",
                {
                    "code": "rows = open('/data/sales.csv').read().splitlines()\n"
                    "open('/out/first.txt', 'w').write('1')\nlen(rows)"
                },
            )
        )
        second = docker.loop.call(
            session.call(
                "execute_code",
                {
                    "code": "import os\nopen('/out/second.txt', 'w').write('2')\n"
                    "[len(rows), sorted(os.listdir('/out'))]"
                },
            )
        )
        with pytest.raises(Exception, match="keeps state mounts its inputs"):
            docker.loop.call(
                session.execute_code("1", inputs={"salaries.csv": inputs["salaries.csv"]})
            )
    finally:
        docker.loop.call(session.close())
    assert body(first)["value"] == 2
    assert body(second)["value"] == [2, ["second.txt"]]
    assert [a["name"] for a in body(first)["artifacts"]] == ["first.txt"]
    assert [a["name"] for a in body(second)["artifacts"]] == ["second.txt"]
