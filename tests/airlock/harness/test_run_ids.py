"""A run id the application gives names the session's artifact directories, so it is checked
where the harness takes it: one that could name a path outside the artifact store (a parent,
an absolute path, a separator) is refused before any session exists, and a program's
directory is a child of the store whatever its call id."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.harness import Harness
from airlock.harness._run_ids import artifact_dir
from airlock.policies import Principal, UsageError, parse_policy
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import MemoryAuditStore, Registry

ANALYST = Principal(user_id="analyst", tenant_id="acme")
POLICY = 'version = 1\n[principals.analyst]\neffects = ["read(file:*)"]\n'


def harness(tmp_path: Path, backend: ScriptedBackend) -> Harness:
    return Harness(
        Registry(),
        parse_policy(POLICY, source="run-ids-test"),
        backend,
        audit=MemoryAuditStore(),
        artifacts=tmp_path / "store",
    )


BAD = [
    ("parent", "../../outside/conv"),
    ("absolute", "/tmp/outside/abs"),
    ("slash", "conv/1"),
    ("backslash", "conv\\1"),
    ("dot", "."),
    ("dot_dot", ".."),
    ("leading_dot", ".hidden"),
    ("dot_dot_inside", "conv..1"),
    ("leading_dash", "-conv"),
    ("empty", ""),
    ("space", "conv 1"),
    ("newline", "conv\n1"),
    ("nul", "conv\x001"),
    ("non_ascii", "cönv"),
    ("too_long", "r" * 129),
]


@pytest.mark.parametrize("run_id", [case[1] for case in BAD], ids=[case[0] for case in BAD])
def test_a_run_id_that_could_leave_the_artifact_store_is_refused(
    tmp_path: Path, run_id: str
) -> None:
    backend = ScriptedBackend([])
    owner = harness(tmp_path, backend)
    with pytest.raises(UsageError) as refused:
        owner.session(ANALYST, run_id=run_id)
    assert refused.value.code == "usage_error"
    assert "run_id" in str(refused.value)
    with pytest.raises(UsageError):
        owner.resume_session(ANALYST, run_id)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing made anywhere


GOOD = ["run_fixed", "run_" + "0123456789abcdef" * 2, "conv-42", "acme.conv:7", "r" * 128]


@pytest.mark.parametrize("run_id", GOOD)
@pytest.mark.anyio
async def test_a_program_of_a_good_run_id_stores_its_files_in_the_store(
    tmp_path: Path, run_id: str
) -> None:
    backend = ScriptedBackend([ok_result(1)])
    session = harness(tmp_path, backend).session(ANALYST, run_id=run_id)
    assert session.run_id == run_id
    await session.call("execute_code", {"code": "1"})
    [directory] = backend.artifact_dirs
    assert directory is not None
    assert directory.parent == tmp_path / "store"
    assert directory.name.startswith(run_id.replace(":", "-") + "-m1-")


CALL_IDS = [
    ("parent", "../x:m1-abc"),
    ("absolute", "/tmp/x:m1-abc"),
    ("slash", "a/b:m1-abc"),
    ("dot_dot", ".."),
    ("dot", "."),
    ("empty", ""),
]


@pytest.mark.parametrize("call_id", [c[1] for c in CALL_IDS], ids=[c[0] for c in CALL_IDS])
def test_a_call_id_that_names_no_child_of_the_store_is_refused(
    tmp_path: Path, call_id: str
) -> None:
    with pytest.raises(UsageError):
        artifact_dir(tmp_path / "store", call_id)


def test_a_program_directory_is_named_after_its_call_id(tmp_path: Path) -> None:
    root = tmp_path / "store"
    assert artifact_dir(root, "run_1:m3-abc") == root / "run_1-m3-abc"
