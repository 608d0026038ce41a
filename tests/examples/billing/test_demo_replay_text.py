"""The demo replay's closing text is true wherever it is played: ``airlock chat --replay``
ends with the refunds waiting for a person (no approval happened), ``airlock demo`` approves
them between the turns. A recording cannot know which, so it claims neither."""

from __future__ import annotations

from airlock.frontends import ReplayModel
from examples.billing.story import DEMO_REPLAY


def test_the_closing_text_says_the_refunds_wait_and_claims_none_sent() -> None:
    last = ReplayModel.load(DEMO_REPLAY).turns[-1].content
    said = " ".join(str(block.get("text", "")) for block in last).lower()
    assert "one batch" in said
    assert "until a person" in said
    assert "approves" in said
    for claim in ("refunded", "you approved", "was sent", "were sent", "committed"):
        assert claim not in said, claim
