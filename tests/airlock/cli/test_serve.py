"""``airlock serve --mcp``: the session budget (its time from the first call, set on the
command line) and, over HTTP, one session per MCP client behind a bearer token."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from airlock.cli import app
from airlock.cli._serve_http import TOKEN_ENV, bearer_token
from airlock.harness import Budget, Harness
from airlock.policies import UsageError, load_policy
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import MemoryAuditStore
from airlock.tools.testing import SystemOfRecord
from tests.airlock.conversation_registry import ALICE, build_registry
from tests.conftest import require_docker
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
SERVE = [
    str(Path(sys.executable).parent / "airlock"),
    "serve",
    "--mcp",
    "--registry",
    "tests.airlock.conversation_registry:registry",
    "--policy",
    str(ROOT / "tests" / "airlock" / "conversation_policy.toml"),
    "--user",
    "alice",
]


def _text(result: object) -> str:
    content = getattr(result, "content", None)
    assert content, result
    return str(content[0].text)


def test_help_documents_the_budget_options_and_the_token() -> None:
    shown = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    for option in ("--budget-seconds", "--budget-calls", "--budget-bytes", "--max-clients"):
        assert option in shown.output
    assert TOKEN_ENV in shown.output
    assert "first call" in shown.output


@pytest.mark.anyio
async def test_a_first_call_budget_starts_with_the_first_call(tmp_path: Path) -> None:
    harness = Harness(
        build_registry(SystemOfRecord(tmp_path / "system.db")),
        load_policy(ROOT / "tests" / "airlock" / "conversation_policy.toml"),
        ScriptedBackend([]),
        audit=MemoryAuditStore(),
        budget=Budget(seconds=0.2, starts="first_call"),
    )
    session = harness.session(ALICE)
    await anyio.sleep(0.3)  # idle, longer than the whole budget: nothing was used
    first = await session.call("billing_invoice_get", {"invoice_id": "inv_001"})
    assert (first.is_error, first.code) == (False, None)
    await anyio.sleep(0.3)
    late = await session.call("billing_invoice_get", {"invoice_id": "inv_001"})
    assert (late.code, json.loads(late.content)["limit"]) == ("limit_exceeded", "time")


def test_the_token_comes_from_the_environment_or_is_generated() -> None:
    generated, from_env = bearer_token({})
    assert (len(generated), from_env) == (43, False)
    assert bearer_token({})[0] != generated
    assert bearer_token({TOKEN_ENV: "k" * 20}) == ("k" * 20, True)
    for refused in ("short", "has a space in it, long", "é" * 20):
        with pytest.raises(UsageError):
            bearer_token({TOKEN_ENV: refused})


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_stdio_server_left_idle_still_serves_and_counts_its_budget(
    tmp_path: Path,
) -> None:
    require_docker()
    params = StdioServerParameters(
        command=SERVE[0],
        args=[*SERVE[1:], "--budget-seconds", "2", "--budget-calls", "2"],
        env={**os.environ, "AIRLOCK_HOME": str(tmp_path), "AIRLOCK_POOL_SIZE": "0"},
        cwd=ROOT,
    )
    with anyio.fail_after(120):
        async with Client(params) as client:
            await client.list_tools()
            await anyio.sleep(2.5)  # the server idles longer than its time budget
            first = await client.call_tool("billing_invoice_get", {"invoice_id": "inv_001"})
            assert not first.is_error, _text(first)
            await client.call_tool("billing_invoice_get", {"invoice_id": "inv_002"})
            third = await client.call_tool("billing_invoice_get", {"invoice_id": "inv_003"})
    assert json.loads(_text(third))["limit"] == "calls"
    assert "budget of 2 tool calls" in _text(third)


@pytest.fixture
def http_server(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    env = {**os.environ, "AIRLOCK_HOME": str(tmp_path), "AIRLOCK_POOL_SIZE": "0"}
    env.pop(TOKEN_ENV, None)
    env.update(getattr(request, "param", {}))
    process = subprocess.Popen(
        [*SERVE, "--http", str(port), "--budget-calls", "3"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _token_from(process: subprocess.Popen[bytes]) -> str:
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stderr.readline().decode()
        assert line or process.poll() is None, "the server ended"
        if "Authorization: Bearer TOKEN" in line:
            return line.rsplit("TOKEN being ", 1)[1].strip()
    raise AssertionError("no token printed")


@pytest.mark.docker
@pytest.mark.anyio
async def test_serve_http_gives_each_client_a_session_of_its_own_behind_a_token(
    http_server: tuple[str, subprocess.Popen[bytes]],
) -> None:
    require_docker()
    url, process = http_server
    token = await anyio.to_thread.run_sync(_token_from, process)
    async with httpx.AsyncClient() as plain:
        refused = await plain.post(url, json={})
    assert refused.status_code == 401
    bearer = {"Authorization": f"Bearer {token}"}
    args: dict[str, Any] = {"invoice_id": "inv_007", "reason": "duplicate"}
    with anyio.fail_after(120):
        async with (
            httpx2.AsyncClient(headers=bearer) as http,
            Client(streamable_http_client(url, http_client=http)) as a,
        ):
            paused = await a.call_tool("billing_refund_create", args)
            assert json.loads(_text(paused))["status"] == "needs_approval"
            assert [str(r.uri) for r in (await a.list_resources()).resources]
            for n in range(2):
                await a.call_tool("billing_invoice_get", {"invoice_id": f"inv_00{n}"})
            spent = await a.call_tool("billing_invoice_get", {"invoice_id": "inv_001"})
            assert json.loads(_text(spent))["limit"] == "calls"
            async with Client(streamable_http_client(url, http_client=http)) as b:
                assert (await b.list_resources()).resources == []
                mine = await b.call_tool("billing_invoice_get", {"invoice_id": "inv_002"})
                assert not mine.is_error, _text(mine)


GIVEN = "operator-chosen-token-1234"


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("http_server", [{TOKEN_ENV: GIVEN}], indirect=True)
async def test_a_token_given_in_the_environment_is_used_and_not_printed(
    http_server: tuple[str, subprocess.Popen[bytes]],
) -> None:
    require_docker()
    url, process = http_server
    shown = await anyio.to_thread.run_sync(_token_from, process)
    assert shown == f"the value of {TOKEN_ENV}"
    async with httpx.AsyncClient() as http:
        wrong = await http.get(url, headers={"Authorization": "Bearer " + "x" * len(GIVEN)})
        right = await http.get(url, headers={"Authorization": f"Bearer {GIVEN}"})
    assert wrong.status_code == 401
    assert right.status_code != 401


def test_a_token_too_short_in_the_environment_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, [*SERVE[1:], "--http", "8999"], env={TOKEN_ENV: "short", "AIRLOCK_HOME": str(tmp_path)}
    )
    assert result.exit_code == 2, result.output
    assert "bearer token" in result.output


@pytest.mark.docker
def test_a_port_in_use_stops_the_server_before_it_says_it_serves(tmp_path: Path) -> None:
    require_docker()
    env = {**os.environ, "AIRLOCK_HOME": str(tmp_path), "AIRLOCK_POOL_SIZE": "0"}
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        ended = subprocess.run(
            [*SERVE, "--http", str(port)], cwd=ROOT, env=env, capture_output=True, timeout=120
        )
    said = ended.stderr.decode()
    assert ended.returncode == 2, said
    assert f"cannot listen on 127.0.0.1:{port}" in said
    assert "MCP on http" not in said  # never announced
    assert "Traceback" not in said


@pytest.mark.docker
def test_inputs_refused_at_start_stop_an_http_server_as_they_stop_a_stdio_one(
    tmp_path: Path,
) -> None:
    # Restricted programs cannot open files: the session refuses inputs. Over stdio that ended
    # the server at start; over HTTP it started and refused every client's first request.
    require_docker()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "sales.csv").write_text("a,b\n1,2\n")
    env = {**os.environ, "AIRLOCK_HOME": str(tmp_path), "AIRLOCK_POOL_SIZE": "0"}
    for over in ([], ["--http", str(free_port())]):
        ended = subprocess.run(
            [*SERVE, "--inputs", str(tmp_path / "in"), *over],
            cwd=ROOT,
            env=env,
            input=b"",
            capture_output=True,
            timeout=120,
        )
        said = ended.stderr.decode()
        assert ended.returncode == 2, (over, said)
        assert "restricted language mode" in said, said
        assert "MCP on http" not in said
