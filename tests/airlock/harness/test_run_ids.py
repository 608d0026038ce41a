"""A run id the application gives is its own (a conversation's id): any text of 1 to 256
characters without a control character, checked where the harness takes it. It names the
session's artifact directories only when it is a plain name; any other (a parent, an absolute
path, a separator, an e-mail address) gets a plain prefix and a hash of the whole id, and a
program's directory is a child of the store whatever its call id."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airlock.harness import ArtifactStore, Harness
from airlock.harness._run_ids import artifact_dir
from airlock.policies import Principal, UsageError, parse_policy
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import MemoryAuditStore, Registry
from tests.airlock.harness.batch_world import BatchWorld
from tests.airlock.session_world import ALICE
from tests.tools.test_proposals import PROPOSING

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
    ("empty", ""),
    ("newline", "conv\n1"),
    ("carriage_return", "conv\r1"),
    ("tab", "conv\t1"),
    ("nul", "conv\x001"),
    ("escape", "conv\x1b[31m"),
    ("delete", "conv\x7f"),
    ("c1_next_line", "conv\x851"),
    ("c1_csi", "conv\x9b1"),
    ("lone_surrogate", "conv\ud8001"),
    ("line_separator", "conv\u20281"),
    ("paragraph_separator", "conv\u20291"),
    ("bidi_override", "conv\u202e1"),
    ("bidi_isolate", "conv\u20661"),
    ("zero_width_space", "conv\u200b1"),
    ("byte_order_mark", "\ufeffconv"),
    ("too_long", "r" * 257),
]


@pytest.mark.parametrize("run_id", [case[1] for case in BAD], ids=[case[0] for case in BAD])
def test_a_run_id_that_is_no_text_for_a_name_is_refused(tmp_path: Path, run_id: str) -> None:
    backend = ScriptedBackend([])
    owner = harness(tmp_path, backend)
    with pytest.raises(UsageError) as refused:
        owner.session(ANALYST, run_id=run_id)
    assert refused.value.code == "usage_error"
    assert "run_id" in str(refused.value)
    with pytest.raises(UsageError):
        owner.resume_session(ANALYST, run_id)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing made anywhere


# Run ids an application gives (its own conversation ids) whose programs' directories are
# named after them, as before: letters, digits and _ . -.
PLAIN = ["run_fixed", "run_" + "0123456789abcdef" * 2, "conv-42", "acme.conv-7", "r" * 128]
# Run ids that are no plain name, some of which could name a path outside the store: taken
# as they are, their programs' directories get a plain prefix and a hash of the whole id.
HASHED = [
    ("email", "alice@acme.com-conv-42"),
    # ":" is hashed too: read as "-", "acme:7" and "acme-7" would share their directories.
    ("colon", "acme.conv:7"),
    # A plain id that ends as a hash does would read as another run's hashed name.
    ("hash_ending", "conv-0123456789abcdef"),
    ("slack_thread", "slack:C024BE91L/1355517523.000005"),
    ("parent", "../../outside/conv"),
    ("absolute", "/tmp/outside/abs"),
    ("slash", "conv/1"),
    ("backslash", "conv\\1"),
    ("dot", "."),
    ("dot_dot", ".."),
    ("leading_dot", ".hidden"),
    ("dot_dot_inside", "conv..1"),
    ("leading_dash", "-conv"),
    ("space", "conv 1"),
    ("non_ascii", "cönv"),
    ("longest", "r" * 256),
]


async def _program_dir(tmp_path: Path, run_id: str) -> Path:
    backend = ScriptedBackend([ok_result(1)])
    session = harness(tmp_path, backend).session(ANALYST, run_id=run_id)
    assert session.run_id == run_id  # the run id is the application's, as given
    await session.call("execute_code", {"code": "1"})
    [directory] = backend.artifact_dirs
    assert directory is not None
    assert directory.parent == tmp_path / "store"
    assert directory.resolve().parent == (tmp_path / "store").resolve()
    assert [p.name for p in tmp_path.iterdir() if p.name != "store"] == []
    return directory


@pytest.mark.parametrize("run_id", PLAIN)
@pytest.mark.anyio
async def test_a_program_of_a_plain_run_id_stores_its_files_under_its_name(
    tmp_path: Path, run_id: str
) -> None:
    directory = await _program_dir(tmp_path, run_id)
    assert directory.name.startswith(run_id + "-m1-")


@pytest.mark.parametrize("run_id", [c[1] for c in HASHED], ids=[c[0] for c in HASHED])
@pytest.mark.anyio
async def test_a_program_of_any_other_run_id_stores_its_files_in_the_store_under_a_hash(
    tmp_path: Path, run_id: str
) -> None:
    directory = await _program_dir(tmp_path, run_id)
    assert re.fullmatch(
        r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}-[0-9a-f]{16}-m1-[0-9a-f]+", directory.name
    )


@pytest.mark.anyio
async def test_a_write_paused_under_a_run_id_of_an_application_resumes(tmp_path: Path) -> None:
    """Run ids such as an e-mail address or a chat thread's were taken before run ids were
    checked, and writes paused under them are in ledgers: another process resumes them."""
    world = BatchWorld(tmp_path)
    try:
        for run_id in ("alice@acme.com-conv-42", "slack:C024BE91L/1355517523.000005"):
            session = world.harness.session(ALICE, PROPOSING, run_id=run_id)
            preview_id = await world.pause(session, "inv_3" if "@" in run_id else "inv_4")
            world.approve(preview_id)

            again = world.harness.resume_session(ALICE, run_id, grant=PROPOSING)

            assert [p.preview_id for p in again.pending()] == [preview_id]
            assert (await again.resume(preview_id)).code is None
            assert world.states([preview_id]) == ["committed"]
    finally:
        world.close()


# Call ids whose plain reading would name no child of the store: each gets a hashed name
# inside it.
CALL_IDS = [
    ("parent", "../x:m1-abc"),
    ("absolute", "/tmp/x:m1-abc"),
    ("slash", "a/b:m1-abc"),
    ("dot_dot", ".."),
    ("dot", "."),
    ("empty", ""),
    ("leading_dash", "-x:m1-abc"),
    ("too_long_for_a_file_name", "r" * 300 + ":m1-abc"),
]


@pytest.mark.parametrize("call_id", [c[1] for c in CALL_IDS], ids=[c[0] for c in CALL_IDS])
def test_a_call_id_that_names_no_child_of_the_store_gets_a_hashed_name_in_it(
    tmp_path: Path, call_id: str
) -> None:
    root = tmp_path / "store"
    directory = artifact_dir(root, call_id)
    assert directory.parent == root
    assert re.fullmatch(
        r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}-[0-9a-f]{16}(-m[0-9]+-[a-z]+)?", directory.name
    )
    assert artifact_dir(root, call_id + "x") != directory  # the whole id is hashed


def test_a_program_directory_is_named_after_its_call_id(tmp_path: Path) -> None:
    root = tmp_path / "store"
    assert artifact_dir(root, "run_1:m3-abc") == root / "run_1-m3-abc"


def test_a_link_at_a_program_directory_s_place_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "run_1-m3-abc").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="not be in the artifact store"):
        artifact_dir(root, "run_1:m3-abc")


# (case, run ids stored, the run asked for, the files it has): ids that read the same once
# cleaned keep apart, and a name only cleaning makes is no run's.
ALIKE = [
    ("at", ["alice@acme.com-conv-42", "alice+acme.com-conv-42"], "alice@acme.com-conv-42",
     ["a.csv"]),
    ("plus", ["alice@acme.com-conv-42", "alice+acme.com-conv-42"], "alice+acme.com-conv-42",
     ["b.csv"]),
    ("the cleaned name", ["alice@acme.com-conv-42", "alice+acme.com-conv-42"],
     "alice_acme_com-conv-42", []),
    ("slack", ["slack:C024BE91L/1355517523.000005", "slack_C024BE91L_1355517523_000005"],
     "slack:C024BE91L/1355517523.000005", ["a.csv"]),
    ("plain beside hashed", ["slack:C024BE91L/1355517523.000005",
     "slack_C024BE91L_1355517523_000005"], "slack_C024BE91L_1355517523_000005", ["b.csv"]),
    ("parent", ["../etc", "__etc"], "../etc", ["a.csv"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("stored", "asked", "files"), [row[1:] for row in ALIKE], ids=[row[0] for row in ALIKE]
)
def test_a_runs_artifacts_are_its_own_whatever_its_id(
    tmp_path: Path, stored: list[str], asked: str, files: list[str]
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    for run_id, file in zip(stored, ["a.csv", "b.csv"], strict=True):
        directory = artifact_dir(root, f"{run_id}:m1-abc123")
        directory.mkdir()
        (directory / file).write_text(run_id)
        (directory / "report.csv").write_text(run_id)
    store = ArtifactStore(root)
    listed = store.list(asked)
    assert sorted(ref.name for ref in listed) == sorted([*files, "report.csv"] if files else [])
    if files:
        assert Path(store.get(asked, "report.csv").path).read_text() == asked
    for other in {"a.csv", "b.csv"} - set(files):
        with pytest.raises(UsageError, match="has no artifact"):
            store.get(asked, other)
