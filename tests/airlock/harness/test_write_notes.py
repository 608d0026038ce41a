"""An answer about a write refused for its size or once the byte budget is used up keeps
short notes: the status and the preview or batch id always, a receipt's identifiers as far
as they fit, measured in UTF-8 bytes of the compact JSON the model is given, whatever the
system of record wrote in them (control characters escape to six bytes each)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airlock import Budget
from airlock.harness._call_budget import _SHORT, CallBudget
from airlock.harness._results import byte_size, compact, sized, success
from airlock.harness._write_notes import WRITE_KEPT, write_notes

PREVIEW = "pv_" + "a" * 24
BATCH = "pb_" + "b" * 24
NOTE_BYTES = 400
"""What a write's smallest note stays under (see :data:`_SHORT`)."""
CONTROL = "\u0001" * 128
EMOJI = "\U0001f600"

# case -> the receipt the system of record gave (stored as it came)
HOSTILE = {
    "control characters in every id": {f"{i}_id": CONTROL for i in range(4)} | {"id": CONTROL},
    "emoji keys and values": {f"{i}{EMOJI * 60}_id"[:64]: EMOJI * 128 for i in range(4)}
    | {"id": EMOJI * 128},
    "long ascii values": {f"k{i}_id": "x" * 128 for i in range(8)},
    "a key of escapes": {"\u0002" * 60 + "_id": "r_1", "id": "r_2"},
    "ints and plain ids": {"id": "re_1", "invoice_id": "inv_3", "n_id": 2**40},
    "not a mapping": ["re_1"],
}


def _budget_used_up() -> CallBudget:
    spent = CallBudget(Budget(), run_id="r", audit=None, context=None)  # type: ignore[arg-type]
    spent.meter.bytes = spent.meter.budget.bytes
    return spent


def _answer(receipt: object, **more: Any) -> Any:
    return success(
        {"status": "committed", "preview_id": PREVIEW, "tool": "t", "summary": "s"}
        | {"receipt": receipt}
        | more
    )


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_a_write_answered_once_the_bytes_are_used_up_stays_within_its_cap(case: str) -> None:
    receipt = HOSTILE[case]
    result = _answer(receipt, padding="p" * 5000)
    notes = write_notes(result)()

    answer = _budget_used_up().account(result, keep=write_notes(result), says=WRITE_KEPT)

    assert byte_size(compact(notes[-1])) < NOTE_BYTES
    assert byte_size(answer.content) <= _SHORT, answer.content
    found = json.loads(answer.content)
    assert (answer.code, found["status"], found["preview_id"]) == (
        "limit_exceeded",
        "committed",
        PREVIEW,
    )
    kept = found.get("receipt", {})
    assert kept == {} or (isinstance(receipt, dict) and kept.items() <= receipt.items())


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_a_write_refused_for_its_size_keeps_its_ids_within_the_cap(case: str) -> None:
    result = _answer(HOSTILE[case], counts={"committed": 3}, batch_id=BATCH, padding="p" * 5000)

    answer = sized(result, 1024, keep=write_notes(result), says=WRITE_KEPT)

    found = json.loads(answer.content)
    assert byte_size(answer.content) <= 1024, answer.content
    assert (found["error"], found["preview_id"], found["batch_id"]) == (
        "result_too_large",
        PREVIEW,
        BATCH,
    )


def test_a_receipt_that_fits_is_kept_whole() -> None:
    receipt = {"id": "re_1", "invoice_id": "inv_3"}
    result = _answer(receipt, padding="p" * 5000)

    answer = _budget_used_up().account(result, keep=write_notes(result), says=WRITE_KEPT)

    assert json.loads(answer.content)["receipt"] == receipt
