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


# (case, what stands at the program directory's place, refused): only a link that leads out
# of the store is, whether or not its target exists.
PLACES = [
    ("nothing", None, False),
    ("a directory", "directory", False),
    ("a file", "file", False),
    ("a link within the store", "store/other", False),
    ("a dangling link within the store", "store/nowhere", False),
    ("a link out of the store", "elsewhere", True),
    ("a dangling link out of the store", "nowhere", True),
    ("a link to the store's parent", ".", True),
]


@pytest.mark.parametrize(("case", "place", "refused"), PLACES, ids=[row[0] for row in PLACES])
def test_a_link_out_of_the_store_at_a_program_directory_s_place_is_refused(
    tmp_path: Path, case: str, place: str | None, refused: bool
) -> None:
    root = tmp_path / "store"
    (root / "other").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    at = root / "run_1-m3-abc"
    if place == "directory":
        at.mkdir()
    elif place == "file":
        at.write_text("")
    elif place is not None:
        at.symlink_to(tmp_path / place)
    if refused:
        with pytest.raises(UsageError, match="not be in the artifact store"):
            artifact_dir(root, "run_1:m3-abc")
    else:
        assert artifact_dir(root, "run_1:m3-abc") == at, case


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


# What a program's directory is named: NAME-mN-NONCE.
PROGRAM_DIR = re.compile(r".+-m[0-9]+-[A-Za-z0-9]{1,32}")

# (case, run id): ids whose own directory (``airlock run``'s), named as they are or after a
# plain prefix, would read as another run's program's directory; each is hashed so that it
# does not.
PROGRAM_SHAPED = [
    ("a_program_s_directory", "conv-m1-abc123"),
    ("many_digits", "conv-m12-X9"),
    ("dotted", "acme.conv-m3-z"),
    ("two_program_parts", "conv-m1-abc123-m1-zzz"),
    ("cleaned_prefix", "a..-m1"),
    ("truncated_prefix", "x" * 61 + "-m5/zzz"),
]


@pytest.mark.parametrize(
    "run_id", [c[1] for c in PROGRAM_SHAPED], ids=[c[0] for c in PROGRAM_SHAPED]
)
def test_a_run_s_directory_is_never_named_as_a_program_s(tmp_path: Path, run_id: str) -> None:
    root = tmp_path / "store"
    own = artifact_dir(root, run_id).name
    assert not PROGRAM_DIR.fullmatch(own), own
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}-[0-9a-f]{16}", own), own
    assert artifact_dir(root, f"{run_id}:m1-zzz").name == f"{own}-m1-zzz"


# (call id, its directory's name): names stores already hold stay as they were, so their
# runs' artifacts are still found.
KEPT = [
    ("conv-42:m1-abc123", "conv-42-m1-abc123"),
    ("run_fixed", "run_fixed"),
    ("acme.conv-7:m2-x", "acme.conv-7-m2-x"),
    ("alice@acme.com-conv-42:m1-abc123", "alice_acme_com-conv-42-afe5646f4ea6c2bd-m1-abc123"),
    ("slack:C024BE91L/1355517523.000005", "slack_C024BE91L_1355517523_000005-c35792091acf452d"),
    ("conv-0123456789abcdef:m2-x", "conv-0123456789abcdef-3662606f33311fb1-m2-x"),
]


@pytest.mark.parametrize(("call_id", "name"), KEPT)
def test_an_ordinary_run_id_names_its_directories_as_before(
    tmp_path: Path, call_id: str, name: str
) -> None:
    assert artifact_dir(tmp_path, call_id).name == name


# (case, call ids stored, the run or directory asked for, the directories found, or None
# when refused because the name is both a program's directory and another run's id).
SHAPED_STORES = [
    ("both: refused", ["conv:m1-abc123", "conv-m1-abc123:m1-zzz"], "conv-m1-abc123", None),
    ("the program's run", ["conv:m1-abc123", "conv-m1-abc123:m1-zzz"], "conv",
     ["conv-m1-abc123"]),
    ("the directory alone", ["conv:m1-abc123"], "conv-m1-abc123", ["conv-m1-abc123"]),
    ("the run alone", ["conv-m1-abc123:m1-zzz"], "conv-m1-abc123",
     ["conv-m1-abc123-5b5552152d45bf00-m1-zzz"]),
    ("the other run's directory", ["conv:m1-abc123", "conv-m1-abc123:m1-zzz"],
     "conv-m1-abc123-5b5552152d45bf00-m1-zzz", ["conv-m1-abc123-5b5552152d45bf00-m1-zzz"]),
    ("a plain run's own and its programs'", ["conv", "conv:m1-abc123"], "conv",
     ["conv", "conv-m1-abc123"]),
    ("a cleaned prefix", ["a__:m1-abc123", "a..-m1"], "a__", ["a__-m1-abc123"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("stored", "asked", "found"),
    [row[1:] for row in SHAPED_STORES],
    ids=[row[0] for row in SHAPED_STORES],
)
def test_a_name_of_a_program_s_directory_and_of_another_run_is_never_mixed(
    tmp_path: Path, stored: list[str], asked: str, found: list[str] | None
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    for call_id in stored:
        directory = artifact_dir(root, call_id)
        directory.mkdir()
        (directory / "report.csv").write_text(call_id)
    store = ArtifactStore(root)
    if found is None:
        for ask in (lambda: store.list(asked), lambda: store.get(asked, "report.csv")):
            with pytest.raises(UsageError) as refused:
                ask()
            assert refused.value.code == "usage_error"
            assert all(artifact_dir(root, c).name in str(refused.value) for c in stored)
        return
    assert sorted(ref.uri.split("/")[-2] for ref in store.list(asked)) == sorted(found)
    if len(found) == 1:
        ref = store.get(asked, "report.csv")
        assert Path(ref.path).parent.name == found[0]
