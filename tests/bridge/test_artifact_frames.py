"""Artifact frames from a hostile guest, judged on the host (no container needed).

The guest names each file it sends; the host stores it under a directory of its own. Every
frame below tries to put bytes somewhere else, to overwrite, to send more than the limits
allow or to break the contract: the run ends with ``protocol_error`` (or ``limit_exceeded``
for a limit) and nothing is written outside the run's directory. The bridge's own limits end
a run with a message naming the amount and the limit, as the artifacts' do.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import BridgeLimits, RunEnd, ToolSession, encode_frame, serve_run
from airlock.bridge import airlock_wire as wire
from airlock.policies import Grant, Principal
from airlock.sandbox import ArtifactStoreFailed
from airlock.sandbox._artifacts import ArtifactReceiver
from airlock.tools import AuditLog, MemoryAuditStore, Registry

CHUNK = wire.ARTIFACT_CHUNK_BYTES


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def piece(name: Any, data: bytes = b"x", *, offset: int = 0, end: bool = True) -> dict[str, Any]:
    return {
        "type": wire.ARTIFACT,
        "name": name,
        "offset": offset,
        "data": base64.b64encode(data).decode(),
        "end": end,
    }


DONE = {"type": wire.DONE, "result": {"status": "ok"}}


async def serve(
    frames: list[dict[str, Any]],
    receiver: ArtifactReceiver | None,
    session: ToolSession | None = None,
) -> dict[str, Any] | RunEnd | None:
    """Serve ``frames`` as a guest would send them; what :func:`serve_run` answered."""
    host, guest = socket.socketpair()
    try:
        reader, writer = await asyncio.open_connection(sock=host)
        guest.setblocking(True)
        payload = b"".join(encode_frame(f) for f in frames)
        sender = asyncio.get_running_loop().run_in_executor(None, guest.sendall, payload)
        outcome = await serve_run(
            reader,
            writer,
            session=session,
            deadline=time.monotonic() + 10,
            max_done_bytes=1 << 20,
            artifacts=receiver,
        )
        writer.transport.abort()
        guest.close()
        await asyncio.gather(sender, return_exceptions=True)
        return outcome
    finally:
        guest.close()
        host.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "artifacts"
    yield root
    # Nothing anywhere under tmp_path but the run's own directory (and the root above it).
    outside = [p for p in tmp_path.rglob("*") if not (p == root or p.is_relative_to(root / "run"))]
    assert outside == []


def receiver(root: Path, *, files: int = 8, size: int = 4 * CHUNK) -> ArtifactReceiver:
    return ArtifactReceiver(root / "run", max_files=files, max_bytes=size)


HOSTILE_NAMES = [
    ("parent", "../escape.txt"),
    ("parent_inside", "a/../../escape.txt"),
    ("absolute", "/etc/passwd"),
    ("hidden", ".bashrc"),
    ("hidden_part", "a/.ssh/id"),
    ("option", "--remove-files"),
    ("option_part", "a/-rf"),
    ("empty_part", "a//b"),
    ("trailing_slash", "dir/"),
    ("backslash", "a\\b"),
    ("space", "a b.txt"),
    ("newline", "a\nb"),
    ("trailing_newline", "a.txt\n"),
    ("nul", "a\x00b"),
    ("non_ascii", "caf\u00e9.txt"),
    ("too_long_part", "x" * 129),
    ("too_deep", "/".join(["d"] * 9)),
    ("empty", ""),
    ("number", 7),
    ("list", ["a"]),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "name"), HOSTILE_NAMES, ids=[c for c, _ in HOSTILE_NAMES])
async def test_a_name_that_is_not_a_safe_path_ends_the_run(
    store: Path, case: str, name: Any
) -> None:
    outcome = await serve([piece(name), DONE], receiver(store))
    assert isinstance(outcome, RunEnd)
    assert (outcome.code, outcome.limit) == ("protocol_error", None)
    assert "artifact name" in outcome.message


BROKEN = [
    ("bad_base64", [{**piece("a.txt"), "data": "!!!"}], "not base64"),
    ("short_middle_piece", [piece("a.txt", b"xy", end=False)], "every piece but the last"),
    ("piece_over_chunk", [piece("a.txt", b"x" * (CHUNK + 1))], "base64 of one piece|every piece"),
    ("first_piece_late", [piece("a.txt", offset=5)], "starts at offset 5"),
    (
        "gap",
        [piece("a.txt", b"x" * CHUNK, end=False), piece("a.txt", offset=CHUNK + 1)],
        "expected 262144",
    ),
    ("sent_twice", [piece("a.txt"), piece("a.txt")], "sent twice"),
    ("file_then_directory", [piece("a"), piece("a/b")], "cannot be stored"),
    ("negative_offset", [piece("a.txt", offset=-1)], "'offset' must be"),
    ("end_not_bool", [{**piece("a.txt"), "end": 1}], "'end' a bool"),
    ("never_ended", [piece("a.txt", b"x" * CHUNK, end=False)], None),
    # A frame holds one piece and what names it, nothing else, and no more.
    ("unknown_key", [{**piece("a.txt"), "pad": 0}], r"unknown keys \['pad'\]"),
    ("unknown_keys", [{**piece("a.txt"), "b": 0, "a": [0]}], r"unknown keys \['a', 'b'\]"),
    ("frame_over_one_piece", [piece("a.txt", b"x" * (CHUNK + 4096))], "limit of one piece"),
    # 60 of these once carried 63 MB past a 2 MiB max_bytes_in, each decoded by the host.
    ("junk_of_a_megabyte", [{**piece("a.txt"), "pad": "x" * 1_000_000}], "limit of one piece"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "frames", "message"), BROKEN, ids=[c for c, _, _ in BROKEN])
async def test_a_frame_against_the_contract_ends_the_run(
    store: Path, case: str, frames: list[dict[str, Any]], message: str | None
) -> None:
    sink = receiver(store)
    outcome = await serve([*frames, DONE], sink)
    if message is None:  # the bridge accepts it; the run's end finds the file unfinished
        assert outcome == DONE
        with pytest.raises(Exception, match="never finished"):
            sink.finish()
        return
    assert isinstance(outcome, RunEnd)
    assert outcome.code == "protocol_error"
    assert re.search(message, outcome.message), outcome.message


@pytest.mark.anyio
async def test_an_artifact_frame_in_a_run_that_collects_none_ends_it(store: Path) -> None:
    outcome = await serve([piece("a.txt"), DONE], None)
    assert isinstance(outcome, RunEnd)
    assert (outcome.code, outcome.message) == (
        "protocol_error",
        "this run collects no artifacts",
    )


@pytest.mark.anyio
async def test_more_files_than_the_limit_end_the_run_naming_the_limit(store: Path) -> None:
    frames = [piece(f"f{n}.txt") for n in range(4)]
    outcome = await serve([*frames, DONE], receiver(store, files=3))
    assert isinstance(outcome, RunEnd)
    assert (outcome.code, outcome.limit) == ("limit_exceeded", "artifacts")
    assert "more than 3 files" in outcome.message


@pytest.mark.anyio
async def test_more_bytes_than_the_limit_end_the_run_naming_the_amount(store: Path) -> None:
    frames = [
        piece("big.bin", b"x" * CHUNK, end=False),
        piece("big.bin", b"x" * CHUNK, offset=CHUNK, end=True),
    ]
    outcome = await serve([*frames, DONE], receiver(store, size=CHUNK + 10))
    assert isinstance(outcome, RunEnd)
    assert (outcome.code, outcome.limit) == ("limit_exceeded", "artifacts")
    assert f"more than {CHUNK + 10} bytes" in outcome.message
    assert f"{2 * CHUNK} bytes arrived" in outcome.message


@pytest.mark.anyio
async def test_files_in_order_are_stored_with_what_the_host_computed(store: Path) -> None:
    content = os.urandom(CHUNK + 100)
    frames = [
        piece("charts/sales.png", content[:CHUNK], end=False),
        piece("charts/sales.png", content[CHUNK:], offset=CHUNK),
        piece("table.csv", b"a,b\n1,2\n"),
        piece("empty.bin", b""),
        DONE,
    ]
    sink = receiver(store)
    assert await serve(frames, sink) == DONE
    refs = {ref.name: ref for ref in sink.finish()}
    assert sorted(refs) == ["charts/sales.png", "empty.bin", "table.csv"]
    chart = refs["charts/sales.png"]
    assert chart.size_bytes == len(content)
    assert chart.sha256 == hashlib.sha256(content).hexdigest()
    assert chart.media_type == "image/png"
    assert chart.uri == "airlock://artifacts/run/charts/sales.png"
    assert Path(chart.path).read_bytes() == content
    assert refs["table.csv"].media_type == "text/csv"
    assert refs["empty.bin"].media_type == "application/octet-stream"
    assert refs["empty.bin"].size_bytes == 0
    # Only this process may read them: the directory is the host's, not the program's.
    assert (store / "run").stat().st_mode & 0o777 == 0o700
    assert Path(chart.path).stat().st_mode & 0o777 == 0o600


def test_a_receiver_never_writes_into_a_directory_that_exists(tmp_path: Path) -> None:
    # A run's directory is new: a second run of the same id cannot add to or overwrite it.
    (tmp_path / "run").mkdir()
    sink = ArtifactReceiver(tmp_path / "run", max_files=1, max_bytes=10)
    with pytest.raises(ArtifactStoreFailed) as refused:  # the host's store, not the program
        sink.receive("a.txt", 0, b"x", end=True)
    assert isinstance(refused.value.__cause__, FileExistsError)
    assert list((tmp_path / "run").iterdir()) == []


def test_a_link_planted_in_the_store_is_not_followed(tmp_path: Path) -> None:
    # Someone with write access to the store plants a link where a file will go: O_NOFOLLOW
    # with O_EXCL refuses it instead of writing through it.
    target = tmp_path / "elsewhere.txt"
    sink = ArtifactReceiver(tmp_path / "run", max_files=2, max_bytes=10)
    sink.receive("first.txt", 0, b"1", end=True)
    (tmp_path / "run" / "second.txt").symlink_to(target)
    with pytest.raises(Exception, match="cannot be stored"):
        sink.receive("second.txt", 0, b"2", end=True)
    assert not target.exists()


def test_discard_removes_what_arrived(tmp_path: Path) -> None:
    sink = ArtifactReceiver(tmp_path / "run", max_files=2, max_bytes=10)
    sink.receive("a.txt", 0, b"1", end=True)
    sink.discard()
    assert not (tmp_path / "run").exists()
    assert sink.finish() == ()


def _session(limits: BridgeLimits) -> ToolSession:
    return ToolSession(
        registry=Registry(audit=AuditLog(MemoryAuditStore())),
        principal=Principal(user_id="u", tenant_id="t"),
        grant=Grant(),
        limits=limits,
    )


BRIDGE_LIMITS = [
    (
        "bytes_in",
        BridgeLimits(max_bytes_in=2000),
        [{"type": wire.LOG, "message": "x" * 900}] * 3,
        "the program sent 2... bytes through the bridge; the limit is 2000 bytes",
    ),
    (
        "calls",
        BridgeLimits(max_calls=2),
        [{"type": wire.CALL, "id": n, "tool": "nope_tool", "args": {}} for n in (1, 2, 3)],
        "the program asked for 3 tool calls; the limit is 2 per program",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "limits", "frames", "message"), BRIDGE_LIMITS, ids=[c[0] for c in BRIDGE_LIMITS]
)
async def test_a_bridge_limit_names_the_amount_and_the_limit(
    case: str, limits: BridgeLimits, frames: list[dict[str, Any]], message: str
) -> None:
    outcome = await serve([*frames, DONE], None, _session(limits))
    assert isinstance(outcome, RunEnd)
    assert outcome.code == "limit_exceeded"
    assert re.fullmatch(re.escape(message).replace(r"\.\.\.", r"\d+"), outcome.message), (
        outcome.message
    )


@pytest.mark.anyio
@pytest.mark.parametrize("items", [2, 3], ids=["at_the_limit", "past_it"])
async def test_a_batch_frame_past_max_batch_items_breaks_the_protocol(items: int) -> None:
    # The guest sends a longer list as several frames: a longer frame is forged, not a limit
    # the program met (whose advice would be to split the work across programs).
    frame = {"type": wire.BATCH, "id": 1, "tool": "nope_tool", "items": [{}] * items}
    outcome = await serve([frame, DONE], None, _session(BridgeLimits(max_batch_items=2)))
    if items == 2:
        assert outcome == DONE
        return
    assert isinstance(outcome, RunEnd)
    assert outcome.code == "protocol_error"
    assert outcome.message == "a batch of 3 items is over the run's limit of 2 items a frame"


_LONG_NAME = "/".join(["d" * 120] * 7) + "/f"
"""An artifact name of 969 characters: what a frame carries besides its piece."""
ARTIFACT_BYTES_IN = [
    # The files' bytes count against the artifacts' budget (here 8 pieces), not max_bytes_in.
    ("pieces_within_their_own_budget", 20_000,
     [piece(f"f{n}.bin", b"x" * CHUNK) for n in range(8)], None),
    # The rest of each frame counts against max_bytes_in, as any frame does.
    ("names_past_max_bytes_in", 4_000,
     [piece(f"{_LONG_NAME}{n}", b"") for n in range(8)], "the program sent 4... bytes"),
    ("names_and_a_log_line", 2_500,
     [{"type": wire.LOG, "message": "x" * 1800}, piece(_LONG_NAME, b"x" * CHUNK)],
     "the program sent 2... bytes"),
]  # fmt: skip


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "max_bytes_in", "frames", "message"),
    ARTIFACT_BYTES_IN,
    ids=[c[0] for c in ARTIFACT_BYTES_IN],
)
async def test_an_artifact_frame_counts_all_but_its_piece_against_max_bytes_in(
    store: Path, case: str, max_bytes_in: int, frames: list[dict[str, Any]], message: str | None
) -> None:
    sink = receiver(store, files=8, size=8 * CHUNK)
    outcome = await serve([*frames, DONE], sink, _session(BridgeLimits(max_bytes_in=max_bytes_in)))
    if message is None:
        assert outcome == DONE
        assert len(sink.finish()) == len(frames)
        return
    assert isinstance(outcome, RunEnd)
    assert (outcome.code, outcome.limit) == ("limit_exceeded", "bytes")
    assert re.fullmatch(
        re.escape(message).replace(r"\.\.\.", r"\d+")
        + f" through the bridge; the limit is {max_bytes_in} bytes",
        outcome.message,
    ), outcome.message
