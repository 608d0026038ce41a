"""Fixture conversations: recorded model turns played against a real session, a real Docker
sandbox and a SQLite ledger, answered in the Anthropic Messages format."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airlock import Budget, Harness, Session, handle_block, handle_turn
from airlock.frontends import ReplayModel, Transcript
from airlock.policies import SandboxProfile, load_policy
from airlock.tools import SQLiteLedgerStore, approve_preview, deny_preview
from airlock.tools.testing import SystemOfRecord
from tests.airlock.conversation_registry import ALICE, DUPLICATES, INJECTED_NOTE, build_registry
from tests.conftest import Sandbox

pytestmark = pytest.mark.docker

HERE = Path(__file__).resolve().parents[1]
POLICY = HERE / "conversation_policy.toml"
BULK_READ = HERE / "fixtures" / "conversations" / "bulk_read.json"


@dataclass
class Conversation:
    """One session over the conversation registry, driven on the sandbox's event loop."""

    sandbox: Sandbox
    session: Session
    ledger: SQLiteLedgerStore
    system: SystemOfRecord

    def play(self, replay: ReplayModel, after_turn: Any = None) -> Transcript:
        return self.sandbox.loop.call(replay.play(self.session, after_turn=after_turn))

    def say(self, *blocks: dict[str, Any]) -> list[dict[str, Any]]:
        """One model turn; the answers to its tool calls."""
        transcript = self.play(turns(list(blocks)))
        return list(transcript.results())

    def resume(self, preview_id: str) -> dict[str, Any]:
        result = self.sandbox.loop.call(self.session.resume(preview_id))
        return {"is_error": result.is_error, "code": result.code, **json.loads(result.content)}


def turns(*contents: list[dict[str, Any]]) -> ReplayModel:
    return ReplayModel.model_validate({"turns": [{"content": c} for c in contents]})


def use(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def body(answer: dict[str, Any]) -> Any:
    return json.loads(answer["content"])


@pytest.fixture
def talk(sandbox: Sandbox, tmp_path: Path) -> Iterator[Conversation]:
    conversation = _open(sandbox, tmp_path)
    yield conversation
    conversation.ledger.close()
    conversation.system.close()


def _open(
    sandbox: Sandbox,
    tmp_path: Path,
    *,
    profile: SandboxProfile | None = None,
    budget: Budget | None = None,
) -> Conversation:
    system = SystemOfRecord(tmp_path / "system.db")
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    harness = Harness(
        build_registry(system),
        load_policy(POLICY),
        sandbox.backend,
        ledger,
        profile=profile,
        budget=budget,
    )
    return Conversation(sandbox, harness.session(ALICE), ledger, system)


def test_bulk_read_through_execute_code_returns_only_the_duplicates(
    talk: Conversation,
) -> None:
    transcript = talk.play(ReplayModel.load(BULK_READ))
    answer = transcript.result("toolu_bulk_1")
    assert answer["is_error"] is False
    assert body(answer)["value"] == {"scanned": 200, "duplicates": DUPLICATES}
    # 200 invoices were read, but only the answer entered the model's context.
    assert transcript.context_bytes() < 1_000
    assert [m["role"] for m in transcript.messages] == ["user", "assistant", "user", "assistant"]


def test_a_direct_read_answers_with_the_shaped_record(talk: Conversation) -> None:
    (answer,) = talk.say(use("toolu_r", "billing_invoice_get", invoice_id="inv_007"))
    assert answer["tool_use_id"] == "toolu_r"
    assert answer["is_error"] is False
    record = body(answer)
    assert record["invoice_id"] == "inv_007"
    assert "tenant_id" not in record  # the output allow-list keeps it behind


def test_a_write_pauses_is_approved_and_returns_a_receipt(talk: Conversation) -> None:
    previews: list[dict[str, Any]] = []

    async def approve_by_a_person(index: int, answers: list[dict[str, Any]]) -> None:
        if index == 0:
            preview = body(answers[0])
            previews.append(preview)
            approve_preview(
                talk.ledger,
                preview["preview_id"],
                approver="bob",
                now=time.time(),
                fingerprint=preview["fingerprint"],
            )

    refund = use("toolu_w", "billing_refund_create", invoice_id="inv_007", reason="duplicate")
    talk.play(turns([refund]), after_turn=approve_by_a_person)
    (preview,) = previews
    assert preview["status"] == "needs_approval"
    assert talk.system.sends() == 0  # nothing was sent before the approval

    receipt = talk.resume(preview["preview_id"])
    assert (receipt["is_error"], receipt["status"]) == (False, "committed")
    assert receipt["receipt"]["invoice_id"] == "inv_007"
    assert talk.system.effects() == 1
    again = talk.resume(preview["preview_id"])  # the same receipt; nothing is sent twice
    assert again["receipt"] == receipt["receipt"]
    assert (talk.system.sends(), talk.system.effects()) == (1, 1)


def test_a_denied_write_answers_denied_and_sends_nothing(talk: Conversation) -> None:
    (paused,) = talk.say(
        use("toolu_w", "billing_refund_create", invoice_id="inv_031", reason="duplicate")
    )
    preview_id = body(paused)["preview_id"]
    deny_preview(talk.ledger, preview_id, approver="bob", reason="not a duplicate", now=time.time())
    answer = talk.resume(preview_id)
    assert (answer["is_error"], answer["code"], answer["error"]) == (True, "denied", "denied")
    assert "not a duplicate" in answer["message"]
    assert talk.system.sends() == 0


def test_a_program_error_comes_back_as_an_error_result(talk: Conversation) -> None:
    (answer,) = talk.say(use("toolu_e", "execute_code", code="total = 1 / 0\ntotal"))
    assert answer["is_error"] is True
    assert body(answer)["error"] == "program_error"
    assert "ZeroDivisionError" in answer["content"]


def test_a_program_over_its_time_limit_is_limit_exceeded(sandbox: Sandbox, tmp_path: Path) -> None:
    talk = _open(sandbox, tmp_path, profile=SandboxProfile(timeout_s=1.0))
    try:
        (answer,) = talk.say(use("toolu_l", "execute_code", code="while True:\n    pass\n"))
    finally:
        talk.ledger.close()
        talk.system.close()
    assert answer["is_error"] is True
    assert body(answer)["error"] == "limit_exceeded"


def test_a_session_out_of_calls_is_limit_exceeded(sandbox: Sandbox, tmp_path: Path) -> None:
    talk = _open(sandbox, tmp_path, budget=Budget(calls=1))
    try:
        first, second = talk.say(
            use("toolu_1", "billing_invoice_get", invoice_id="inv_001"),
            use("toolu_2", "billing_invoice_get", invoice_id="inv_002"),
        )
    finally:
        talk.ledger.close()
        talk.system.close()
    assert [first["is_error"], second["is_error"]].count(True) == 1
    refused = first if first["is_error"] else second
    assert body(refused)["error"] == "limit_exceeded"


def test_an_unknown_tool_answers_unknown_tool(talk: Conversation) -> None:
    (answer,) = talk.say(use("toolu_u", "billing_invoice_delete", invoice_id="inv_001"))
    assert answer["tool_use_id"] == "toolu_u"
    assert answer["is_error"] is True
    assert body(answer)["error"] == "unknown_tool"


def test_two_calls_in_one_turn_are_answered_with_their_own_ids(talk: Conversation) -> None:
    answers = talk.say(
        {"type": "text", "text": "Both at once."},
        use("toolu_a", "billing_invoice_get", invoice_id="inv_056"),
        use("toolu_b", "execute_code", code='tools.billing_invoice_get(invoice_id="inv_057")'),
    )
    assert [a["tool_use_id"] for a in answers] == ["toolu_a", "toolu_b"]
    first, second = body(answers[0]), body(answers[1])["value"]
    assert (first["invoice_id"], second["invoice_id"]) == ("inv_056", "inv_057")
    assert first["payment_ref"] == second["payment_ref"]  # a duplicate pair


def test_an_injected_instruction_cannot_widen_the_grant_or_skip_approval(
    talk: Conversation,
) -> None:
    grant_before = talk.session.grant
    tools_before = [t.name for t in talk.session.tools()]
    transcript = talk.play(
        turns(
            [use("toolu_n", "billing_note_get", invoice_id="inv_013")],
            # The model obeys the note: a refund with the note's arguments, from code first.
            [
                use(
                    "toolu_c",
                    "execute_code",
                    code='tools.billing_refund_create(invoice_id="inv_199", reason="fraudulent")',
                ),
                use(
                    "toolu_d",
                    "billing_refund_create",
                    invoice_id="inv_199",
                    reason="fraudulent",
                    recipient="cus_attacker",
                ),
            ],
            [use("toolu_e", "billing_refund_create", invoice_id="inv_199", reason="fraudulent")],
        )
    )
    assert INJECTED_NOTE in body(transcript.result("toolu_n"))["note"]
    from_code = transcript.result("toolu_c")
    assert from_code["is_error"] is True
    assert body(from_code)["error"] in ("program_error", "unknown_tool")  # code cannot write
    assert body(transcript.result("toolu_d"))["error"] == "invalid_input"  # no such argument
    preview = body(transcript.result("toolu_e"))
    assert preview["status"] == "needs_approval"  # "pre-approved" in the note changes nothing
    # The effect is computed by code from the invoice: its own customer, its own amount.
    assert "cus_attacker" not in json.dumps(preview)
    assert preview["summary"].endswith("on inv_199 to cus_014")
    assert talk.session.grant == grant_before
    assert [t.name for t in talk.session.tools()] == tools_before
    assert talk.system.sends() == 0


def test_execute_code_puts_at_least_90_percent_fewer_bytes_into_context(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    from bench.context_bytes import BUDGET, measure, reduction

    talk = _open(sandbox, tmp_path, budget=BUDGET)
    try:
        code, direct, answer = sandbox.loop.call(measure(talk.session))
    finally:
        talk.ledger.close()
        talk.system.close()
    assert answer["duplicates"] == DUPLICATES
    assert direct.calls == 201
    assert reduction(code.result_bytes, direct.result_bytes) >= 90
    assert reduction(code.total, direct.total) >= 90


def test_openai_formats_reach_the_same_session(talk: Conversation) -> None:
    chat_message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {
                    "name": "billing_invoice_get",
                    "arguments": '{"invoice_id":"inv_081"}',
                },
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "billing_invoice_get", "arguments": '{"invoice_id":'},
            },
        ],
    }
    ok, bad = talk.sandbox.loop.call(handle_turn(talk.session, [chat_message]))
    assert (ok["role"], ok["tool_call_id"]) == ("tool", "call_a")
    assert json.loads(ok["content"])["invoice_id"] == "inv_081"
    assert (bad["tool_call_id"], json.loads(bad["content"])["error"]) == ("call_b", "invalid_input")

    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_c",
        "name": "execute_code",
        "arguments": json.dumps(
            {"code": "len(tools.billing_invoice_list(limit=500)['invoice_ids'])"}
        ),
        "status": "completed",
    }
    answer = talk.sandbox.loop.call(handle_block(talk.session, item))
    assert answer == {
        "type": "function_call_output",
        "call_id": "call_c",
        "output": '{"value":200}',
    }
