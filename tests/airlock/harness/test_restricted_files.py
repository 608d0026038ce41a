"""Files are offered only where a program can use them: a program in the restricted
language mode has no ``open()`` and no file modules, so its ``execute_code`` description
offers no ``/data`` nor ``/out``, and inputs under that mode are refused with a UsageError
that says to use ``language_mode='full'``."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.harness import Harness
from airlock.policies import Principal, SandboxProfile, UsageError, parse_policy
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import MemoryAuditStore, Registry

ANALYST = Principal(user_id="analyst", tenant_id="acme")
POLICY = 'version = 1\n[principals.analyst]\neffects = ["read(file:*)"]\n'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def harness(tmp_path: Path, profile: SandboxProfile) -> Harness:
    backend = ScriptedBackend(lambda program, profile: ok_result(1), profile=profile)
    return Harness(
        Registry(),
        parse_policy(POLICY, source="restricted-files-test"),
        backend,
        audit=MemoryAuditStore(),
        artifacts=tmp_path / "store",
    )


@pytest.fixture
def sales(tmp_path: Path) -> Path:
    path = tmp_path / "sales.csv"
    path.write_text("region,amount\nnorth,1\n")
    path.chmod(0o644)
    return path


DESCRIBED = [
    # mode, offered, not offered
    ("restricted", ["cannot open files", "open any file, not even in /tmp"], ["/data", "/out"]),
    ("full", ["/data is empty", "/out", "scratch space in /tmp"], ["cannot open files"]),
]


@pytest.mark.parametrize(("mode", "offered", "absent"), DESCRIBED, ids=[d[0] for d in DESCRIBED])
def test_the_description_offers_files_only_where_a_program_can_open_them(
    tmp_path: Path, mode: str, offered: list[str], absent: list[str]
) -> None:
    profile = SandboxProfile.model_validate({"language_mode": mode})
    text = harness(tmp_path, profile).session(ANALYST).tools()[0].description
    for phrase in offered:
        assert phrase in text, phrase
    for phrase in absent:
        assert phrase not in text, phrase


def test_session_inputs_under_the_restricted_mode_are_a_usage_error(
    tmp_path: Path, sales: Path
) -> None:
    with pytest.raises(UsageError, match=r"language_mode='full'") as raised:
        harness(tmp_path, SandboxProfile()).session(ANALYST, inputs={"sales.csv": sales})
    assert "'sales.csv'" in str(raised.value)
    assert "cannot open files" in str(raised.value)
    full = harness(tmp_path, SandboxProfile(language_mode="full"))
    offered = full.session(ANALYST, inputs={"sales.csv": sales}).tools()[0].description
    assert "/data/sales.csv" in offered


@pytest.mark.anyio
async def test_inputs_of_one_program_under_the_restricted_mode_are_a_usage_error(
    tmp_path: Path, sales: Path
) -> None:
    owner = harness(tmp_path, SandboxProfile())
    session = owner.session(ANALYST)
    with pytest.raises(UsageError, match=r"language_mode='full'"):
        await session.execute_code("1", inputs={"sales.csv": sales})
    assert owner.sandbox.calls == []  # type: ignore[attr-defined]
    assert (await session.execute_code("1")).code is None  # without inputs it runs
