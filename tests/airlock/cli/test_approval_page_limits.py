"""The approval page's limits: an open batch behind many decided ones is still shown as a
batch, and what a limit leaves out (batches, previews) is said on the page, never dropped
silently."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from airlock.cli import _approval_view
from airlock.tools import Batch, Preview
from tests.airlock.cli.test_approval_page import browser, card, page
from tests.tools.test_write_world import ASK, Clock, World


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, clock=Clock())
    yield w
    w.close()


def _prepare(world: World, invoice: str, run_id: str) -> Preview:
    return anyio.run(lambda: world.prepare(invoice, approvals=ASK, run_id=run_id))


def _batch(world: World, run_id: str, *invoices: str) -> Batch:
    """A batch of ``run_id``, newer than those before it."""
    world.clock.advance(1)
    return world.writes.store_batch([_prepare(world, i, run_id) for i in invoices])


def _decided_batches(world: World, count: int) -> None:
    """``count`` newer batches of one item each, every item denied."""
    for n in range(count):
        batch = _batch(world, f"run_{n}", "inv_3")
        world.writes.deny(batch.items[0], approver="bob", reason="not this one")


def _shown(world: World) -> str:
    shown = browser(page(world)).get("/")
    assert shown.status_code == 200, shown.text
    return shown.text


def _left_out(shown: str) -> str:
    """The page's notice of what its limits left out; "" when there is none."""
    if 'id="left-out"' not in shown:
        return ""
    start = shown.index('id="left-out"')
    return html.unescape(shown[start : shown.index("</p>", start)])


@pytest.mark.parametrize("pages", [None, (4, 20, 100)], ids=["one read", "read in steps"])
def test_an_old_batch_with_items_waiting_is_shown_behind_newer_decided_ones(
    world: World, monkeypatch: pytest.MonkeyPatch, pages: tuple[int, ...] | None
) -> None:
    if pages is not None:
        monkeypatch.setattr(_approval_view, "_BATCH_PAGES", pages)
    old = _batch(world, "run_old", "inv_1", "inv_2")
    _decided_batches(world, _approval_view._BATCHES)
    shown = _shown(world)
    batch_card = card(shown, "batch", old.id)
    assert "Approve batch" in batch_card
    for item in old.items:
        assert item in batch_card
        assert f'data-preview="{item}"' not in shown  # not a loose preview without its batch
    assert _left_out(shown) == ""


def test_open_batches_past_the_limit_are_counted_and_their_items_not_listed_alone(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_approval_view, "_BATCHES", 2)
    oldest = _batch(world, "run_a", "inv_1", "inv_2")
    newer = [_batch(world, "run_b", "inv_3"), _batch(world, "run_c", "inv_3")]
    shown = _shown(world)
    for batch in newer:
        assert "Approve batch" in card(shown, "batch", batch.id)
    assert f'data-batch="{oldest.id}"' not in shown
    assert not any(f'data-preview="{item}"' in shown for item in oldest.items)
    assert "1 more batch(es) with 2 item(s) waiting are not shown" in _left_out(shown)


def test_waiting_previews_past_the_limit_are_counted(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_approval_view, "_PREVIEWS", 2)
    previews = [_prepare(world, "inv_3", f"run_{n}") for n in range(3)]
    shown = _shown(world)
    assert sum(f'data-preview="{p.id}"' in shown for p in previews) == 2
    assert "1 more waiting preview(s) are not shown" in _left_out(shown)


def test_expired_previews_that_fill_the_read_are_said_to(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Expired previews stay 'prepared': many of them fill what the page reads of that state.
    monkeypatch.setattr(_approval_view, "_PREPARED", 3)
    expired = [_prepare(world, "inv_3", f"run_{n}") for n in range(3)]
    world.clock.advance(3600)
    fresh = _prepare(world, "inv_3", "run_new")
    shown = _shown(world)
    assert f'data-preview="{fresh.id}"' in shown
    assert not any(f'data-preview="{p.id}"' in shown for p in expired)
    assert "more than 3 previews are in 'prepared'" in _left_out(shown)


def test_a_search_for_batches_that_ends_at_its_bound_says_so(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_approval_view, "_BATCH_PAGES", (1, 2))
    alone = _prepare(world, "inv_1", "run_alone")  # in no batch: the search cannot know
    _decided_batches(world, 3)
    shown = _shown(world)
    assert f'data-preview="{alone.id}"' in shown
    assert "only the newest 2 batches were read" in _left_out(shown)
