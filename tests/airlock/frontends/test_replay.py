"""The replay model drives the tool loop from recorded turns, without a live model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airlock.frontends import MalformedBlockError, ReplayError, ReplayModel
from tests.airlock.fake_surface import EchoSurface

REPLAY = Path(__file__).resolve().parents[1] / "fixtures" / "replay_two_invoices.json"


@pytest.mark.anyio
async def test_a_replay_runs_every_turn_and_builds_the_transcript() -> None:
    surface = EchoSurface()
    transcript = await ReplayModel.load(REPLAY).play(surface)
    roles = [m["role"] for m in transcript.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert [args["invoice_id"] for _, args in surface.calls] == ["inv_1", "inv_2", "inv_3"]
    assert json.loads(transcript.result("toolu_r2")["content"]) == {"invoice_id": "inv_2"}
    assert [b["tool_use_id"] for b in transcript.results()] == ["toolu_r1", "toolu_r2", "toolu_r3"]
    assert transcript.context_bytes() == 3 * len('{"invoice_id":"inv_1"}')


@pytest.mark.anyio
async def test_after_turn_sees_each_turns_answers_before_the_next_turn() -> None:
    seen: list[tuple[int, list[str], int]] = []
    surface = EchoSurface()

    async def after(index: int, answers: list[dict[str, Any]]) -> None:
        seen.append((index, [a["tool_use_id"] for a in answers], len(surface.calls)))

    await ReplayModel.load(REPLAY).play(surface, after_turn=after)
    assert seen == [(0, ["toolu_r1", "toolu_r2"], 2), (1, ["toolu_r3"], 3), (2, [], 3)]


def replay_with_input(value: str) -> str:
    block = '{"type": "tool_use", "id": "t1", "name": "billing_invoice_get", "input": {"a": '
    return '{"turns": [{"content": [' + block + value + "}}]}]}"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{not json", "not JSON"),
        ('{"turns": [{"content": "x"}]}', "turns.0.content"),
        ('{"turns": [], "extra": 1}', "extra"),
        ('{"turns": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests too deep"),
        ('{"turns": [], "prompt": ' + "1" * 5000 + "}", "integer longer than 4300 digits"),
        # Readable, but its call is refused anyway and its messages could not be printed
        # or sent (json.dumps recurses).
        (replay_with_input("[" * 201 + "]" * 201), "nests deeper than 205 levels"),
        (replay_with_input("[" * 700 + "]" * 700), "nests deeper than 205 levels"),
        # Blocks that could be neither printed nor sent back as they are.
        ('{"turns": [{"content": [1]}]}', "turns.0.content.0"),
        ('{"turns": [{"content": [{"type": "text"}]}]}', "text block 0 has no string 'text'"),
        ('{"turns": [{"content": [{"type": "text", "text": 5}]}]}', "text block 0 has no"),
        ('{"turns": [{"content": [{"type": "text", "text": null}]}]}', "text block 0 has no"),
        (
            '{"turns": [{"content": [{"type": "text", "text": "ok"}, '
            '{"type": "text", "text": ["a"]}]}]}',
            "turns.0.content: Value error, text block 1 has no string 'text'",
        ),
    ],
)
def test_a_malformed_replay_is_a_usage_error(text: str, fragment: str) -> None:
    with pytest.raises(ReplayError) as raised:
        ReplayModel.from_json(text, source="r.json")
    assert raised.value.code == "replay_file"
    assert fragment in str(raised.value)


def test_a_missing_replay_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="cannot read"):
        ReplayModel.load(tmp_path / "nope.json")


@pytest.mark.anyio
async def test_a_recorded_call_without_an_id_stops_the_replay() -> None:
    replay = ReplayModel.from_json(
        '{"turns": [{"content": [{"type": "tool_use", "name": "x", "input": {}}]}]}'
    )
    with pytest.raises(MalformedBlockError):
        await replay.play(EchoSurface())
