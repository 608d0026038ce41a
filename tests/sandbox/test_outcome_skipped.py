"""What the guest says it skipped in ``/out``, as the host takes it from a ``done`` frame: the
count of every entry skipped reaches the result, and a name or reason the guest's own rules
would never make (markup, control characters, a path, an endless text) is dropped or cut,
never a failed run."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airlock.policies import SandboxProfile
from airlock.sandbox import RunResult
from airlock.sandbox._outcome import judge_outcome

LINK = {"name": "link", "reason": "a symbolic link"}


def _links(count: int) -> list[dict[str, str]]:
    return [{"name": f"link{n}", "reason": "a symbolic link"} for n in range(count)]


# (case, the done frame's artifacts_skipped, its artifacts_skipped_count, the names and
# reasons kept, the count the result carries)
SKIPPED: list[tuple[str, Any, Any, list[tuple[str, str]], int]] = [
    ("none", None, None, [], 0),
    (
        "count_beyond_the_names",
        _links(20),
        50,
        [(f"link{n}", "a symbolic link") for n in range(20)],
        50,
    ),
    ("count_missing", [LINK], None, [("link", "a symbolic link")], 1),
    (
        "count_below_the_names",
        [LINK, LINK | {"name": "b"}],
        1,
        [("link", "a symbolic link"), ("b", "a symbolic link")],
        2,
    ),
    ("count_negative", [LINK], -5, [("link", "a symbolic link")], 1),
    ("count_not_a_number", [LINK], "many", [("link", "a symbolic link")], 1),
    ("count_a_bool", [LINK], True, [("link", "a symbolic link")], 1),
    ("count_huge", [LINK], 10**30, [("link", "a symbolic link")], 2**31 - 1),
    (
        "more_names_than_shown",
        _links(30),
        30,
        [(f"link{n}", "a symbolic link") for n in range(20)],
        30,
    ),
    (
        "name_with_markup",
        [{"name": "[link=https://x.example]r.csv[/link]", "reason": "x"}],
        1,
        [],
        1,
    ),
    ("name_with_controls", [{"name": "a\x1b]0;title\x07", "reason": "x"}], 1, [], 1),
    ("name_a_path_out", [{"name": "../etc/passwd", "reason": "x"}], 1, [], 1),
    ("name_absolute", [{"name": "/etc/passwd", "reason": "x"}], 1, [], 1),
    ("name_too_long", [{"name": "a" * 129, "reason": "x"}], 1, [], 1),
    ("name_too_deep", [{"name": "/".join("d" * 9), "reason": "x"}], 1, [], 1),
    ("name_not_text", [{"name": 7, "reason": "x"}], 1, [], 1),
    ("entry_not_a_record", ["link", 3, None], 3, [], 3),
    ("list_not_a_list", "link", 1, [], 1),
    ("reason_cut", [{"name": "a", "reason": "x" * 2000}], 1, [("a", "x" * 200)], 1),
    (
        "reason_escaped",
        [{"name": "a", "reason": "a\x1b[2Jb\u202e"}],
        1,
        [("a", "a\\x1b[2Jb\\u202e")],
        1,
    ),
    ("reason_not_text", [{"name": "a", "reason": ["x"]}], 1, [], 1),
    ("extra_keys_ignored", [LINK | {"evil": 1}], 1, [("link", "a symbolic link")], 1),
]


class _Container(SimpleNamespace):
    id = "0" * 64


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "entries", "count", "kept", "total"), SKIPPED, ids=[c[0] for c in SKIPPED]
)
async def test_what_the_guest_skipped_is_counted_and_checked(
    case: str, entries: Any, count: Any, kept: list[tuple[str, str]], total: int
) -> None:
    result: dict[str, Any] = {"status": "ok", "exit_status": 0, "has_value": True, "value": 42}
    if entries is not None:
        result["artifacts_skipped"] = entries
    if count is not None:
        result["artifacts_skipped_count"] = count
    run = await judge_outcome(
        {"type": "done", "result": result},
        container=_Container(),  # type: ignore[arg-type]
        began=0.0,
        profile=SandboxProfile(),
        pooled=False,
    )
    assert (run.status, run.value) == ("ok", 42)
    assert [(s.name, s.reason) for s in run.artifacts_skipped] == kept
    assert run.artifacts_skipped_count == total


def test_a_result_made_with_names_counts_them_at_least() -> None:
    # A backend that lists what it skipped and does not count (the fake one) still adds up.
    run = RunResult(
        status="ok",
        exit_status=0,
        has_value=False,
        duration_s=0.0,
        artifacts_skipped=({"name": "a", "reason": "a fifo"},),  # type: ignore[arg-type]
    )
    assert run.artifacts_skipped_count == 1
