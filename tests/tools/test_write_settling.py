"""How a step settles when the answer is not the plain one: a refused resend, an answer for
another change under the key, a lookup that never answers, an error that echoes a secret,
and a commit that meets another in flight."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, write
from airlock.tools import (
    AmbiguousWriteError,
    CallContext,
    ConflictError,
    Credential,
    MemoryAuditStore,
    NotFoundError,
    Preview,
    RateLimitedError,
    Registry,
    Secret,
    ToolError,
    WritePath,
    write_tool,
)
from airlock.tools._audit_log import AuditLog
from airlock.tools._errors import CommitInFlightError
from airlock.tools._receipt_check import receipt_mismatch
from airlock.tools._write_contract import WriteContract
from airlock.tools.testing import Refund, SystemOfRecord, refund_tool
from tests.tools.stores import LEDGER_TABLES, Backend, dump_tables, open_ledger

from .test_write_world import ALICE, INVOICES, TOOL, Clock, context

pytestmark = pytest.mark.anyio

Answer = Callable[[Refund, str], Any]


class Rig:
    """A refund tool over a fake system of record whose commit and lookup a test can take
    over (``commit_instead``, ``lookup_instead``: called in place of the system's, with the
    system's own as ``real``)."""

    def __init__(
        self,
        root: Path,
        *,
        with_lookup: bool = True,
        timeout: float = 5.0,
        sync_lookup: bool = False,
    ) -> None:
        self.system = SystemOfRecord(root / "system.db")
        self.commit_instead: Callable[[Answer, Refund, str], Any] | None = None
        self.lookup_instead: Callable[[Answer, Refund, str], Any] | None = None
        base = refund_tool(self.system, INVOICES, with_lookup=with_lookup, timeout=timeout)
        assert base.write is not None
        real_commit, real_lookup = base.write.commit, base.write.lookup

        async def commit(effect: Refund, key: str) -> Any:
            if self.commit_instead is None:
                return real_commit(effect, key)
            return await _maybe_await(self.commit_instead(real_commit, effect, key))

        async def lookup(effect: Refund, key: str) -> Any:
            assert real_lookup is not None
            if self.lookup_instead is None:
                return real_lookup(effect, key)
            return await _maybe_await(self.lookup_instead(real_lookup, effect, key))

        def lookup_sync(effect: Refund, key: str) -> Any:  # run in a worker thread
            assert real_lookup is not None
            if self.lookup_instead is None:
                return real_lookup(effect, key)
            return self.lookup_instead(real_lookup, effect, key)

        chosen = lookup_sync if sync_lookup else lookup
        contract = dataclasses.replace(
            base.write, commit=commit, lookup=chosen if with_lookup else None
        )
        self.registry = Registry(audit=AuditLog(MemoryAuditStore()))
        self.registry.register(dataclasses.replace(base, write=contract))
        self.ledger = open_ledger(str(root))
        self.clock = Clock()
        self.writes = WritePath(self.registry, self.ledger, clock=self.clock)

    async def prepare(self, invoice: str) -> Preview:
        args = {"invoice_id": invoice, "reason": "duplicate"}
        return await self.writes.preview_call(TOOL, args, context())

    async def unknown(self, invoice: str) -> Preview:
        """A step whose first send acted and lost its reply: ``unknown``, effect applied."""
        preview = await self.prepare(invoice)
        self.system.inject("lose_reply")
        with pytest.raises(AmbiguousWriteError):
            await self.writes.commit(preview.id, preview.fingerprint, ALICE)
        assert self.state(preview) == "unknown"
        return preview

    def state(self, preview: Preview) -> str:
        stored = self.ledger.preview(preview.id)
        assert stored is not None
        return str(stored.state)

    def close(self) -> None:
        self.ledger.close()
        self.system.close()


async def _maybe_await(value: Any) -> Any:
    return await value if hasattr(value, "__await__") else value


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    yield r
    r.close()


@pytest.fixture
def resending_rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path, with_lookup=False)
    yield r
    r.close()


# -- a refused resend proves only that the resend was refused -----------------------------

REFUSALS: list[tuple[str, Callable[[], ToolError]]] = [
    ("429", lambda: RateLimitedError(retry_after=1.0, detail="429 from the system")),
    ("409 key in use", lambda: ConflictError("a request with this key is in progress")),
    ("404", lambda: NotFoundError(detail="the invoice moved")),
]


def _refuse(make: Callable[[], ToolError]) -> Callable[[Answer, Refund, str], Any]:
    def refuse(real: Answer, effect: Refund, key: str) -> Any:
        raise make()

    return refuse


@pytest.mark.parametrize(("name", "make"), REFUSALS, ids=[r[0] for r in REFUSALS])
async def test_a_refused_resend_by_commit_leaves_the_step_unknown(
    resending_rig: Rig, name: str, make: Callable[[], ToolError]
) -> None:
    rig = resending_rig
    preview = await rig.unknown("inv_1")
    rig.commit_instead = _refuse(make)

    with pytest.raises(AmbiguousWriteError) as raised:
        await rig.writes.commit(preview.id, preview.fingerprint, ALICE)

    wire = raised.value.to_wire()
    assert (wire["retryable"], wire["outcome"]) == (True, "unknown")
    assert make().code in raised.value.message
    assert rig.state(preview) == "unknown"  # never "failed": the first send acted
    assert rig.ledger.receipt(preview.key) is None
    again = await rig.prepare("inv_1")
    assert again.id == preview.id  # the key stays held by the step, not freed
    rig.commit_instead = None  # the system takes the resend now: the first send's answer
    receipt = await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert (receipt.preview_id, receipt.resolved_by) == (preview.id, "resend")
    assert rig.system.effects() == 1


@pytest.mark.parametrize(("name", "make"), REFUSALS, ids=[r[0] for r in REFUSALS])
async def test_a_refused_resend_by_reconcile_leaves_the_step_unresolved(
    resending_rig: Rig, name: str, make: Callable[[], ToolError]
) -> None:
    rig = resending_rig
    await rig.unknown("inv_2")
    rig.commit_instead = _refuse(make)

    [resolution] = await rig.writes.reconcile()

    assert (resolution.outcome, resolution.after) == ("unresolved", "unknown")
    assert make().code in resolution.how
    rig.commit_instead = None
    [resolution] = await rig.writes.reconcile()
    assert (resolution.outcome, resolution.after) == ("committed", "committed")
    assert rig.system.effects() == 1


async def test_a_refused_first_send_still_fails_the_step(resending_rig: Rig) -> None:
    rig = resending_rig
    preview = await rig.prepare("inv_3")
    rig.commit_instead = _refuse(lambda: RateLimitedError(retry_after=1.0))
    with pytest.raises(RateLimitedError) as raised:
        await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert raised.value.outcome == "error"
    assert rig.state(preview) == "failed"  # nothing was ever sent that could have acted


# -- an answer for another change is not this step's receipt ------------------------------


def _other_amount(real: Answer, effect: Refund, key: str) -> Any:
    answer = dict(real(effect, key) or {"id": "re_x", "status": "succeeded"})
    return answer | {"invoice_id": effect.invoice_id, "currency": "USD", "amount_minor": 5000}


async def _mismatch_by_send(rig: Rig) -> tuple[Preview, str]:
    preview = await rig.prepare("inv_4")
    rig.commit_instead = _other_amount
    with pytest.raises(ConflictError) as raised:
        await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert (raised.value.outcome, raised.value.retryable) == ("unknown", False)
    return preview, str(raised.value.detail)


async def _mismatch_by_resend(rig: Rig) -> tuple[Preview, str]:
    preview = await rig.unknown("inv_5")
    rig.commit_instead = _other_amount
    with pytest.raises(ConflictError) as raised:
        await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert raised.value.outcome == "unknown"
    return preview, str(raised.value.detail)


async def _mismatch_by_query(rig: Rig) -> tuple[Preview, str]:
    preview = await rig.unknown("inv_6")
    rig.lookup_instead = _other_amount
    [resolution] = await rig.writes.reconcile()
    assert resolution.outcome == "unresolved"
    return preview, resolution.how


async def _mismatch_by_reconcile_resend(rig: Rig) -> tuple[Preview, str]:
    preview = await rig.unknown("inv_7")
    rig.lookup_instead = lambda real, effect, key: None  # "never committed": resend
    rig.commit_instead = _other_amount
    [resolution] = await rig.writes.reconcile()
    assert resolution.outcome == "unresolved"
    return preview, resolution.how


MISMATCHES = {
    "send": _mismatch_by_send,
    "resend by commit": _mismatch_by_resend,
    "query by reconcile": _mismatch_by_query,
    "resend by reconcile": _mismatch_by_reconcile_resend,
}


@pytest.mark.parametrize("path", MISMATCHES)
async def test_an_answer_for_another_effect_is_never_stored_as_the_receipt(
    rig: Rig, path: str
) -> None:
    preview, told = await MISMATCHES[path](rig)

    assert "amount_minor is 5000" in told
    assert rig.ledger.receipt(preview.key) is None
    stored = rig.ledger.preview(preview.id)
    assert stored is not None
    assert stored.state == "unknown"
    assert stored.error is not None
    assert stored.error.startswith("receipt_mismatch: ")
    assert "look at the system of record" in rig.ledger.history(preview.id)[-1].how
    # While the system answers for another change, reconcile never commits on it.
    rig.lookup_instead = _other_amount
    [resolution] = await rig.writes.reconcile()
    assert (resolution.outcome, resolution.after) == ("unresolved", "unknown")


COMPARED: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    ("same", {"amount_minor": 1, "currency": "USD"}, {"amount_minor": 1, "id": "re_1"}, []),
    ("amount", {"amount_minor": 1}, {"amount_minor": 2}, ["amount_minor"]),
    ("two fields", {"a": 1, "b": "x"}, {"a": 2, "b": "y"}, ["a", "b"]),
    ("nothing shared", {"amount_minor": 1}, {"id": "re_1", "status": "ok"}, []),
    ("bool is no number", {"flag": True}, {"flag": 1}, ["flag"]),
    ("nested", {"to": {"iban": "DE1"}}, {"to": {"iban": "DE2"}}, ["to"]),
    ("secret left out", {"password": "secret:ab"}, {"password": "hunter2"}, []),
]


class _Pay(BaseModel):
    amount_minor: int = 0
    currency: str = "USD"
    a: int = 0
    b: str = ""
    flag: bool = False
    to: dict[str, str] = {}
    password: Annotated[str, Secret()] = ""


@pytest.mark.parametrize(
    ("name", "effect", "answer", "differ"), COMPARED, ids=[c[0] for c in COMPARED]
)
def test_receipt_mismatch_compares_the_fields_both_hold(
    name: str, effect: dict[str, Any], answer: dict[str, Any], differ: list[str]
) -> None:
    contract = WriteContract(
        prepare=lambda args, principal: None,
        commit=lambda effect, key: None,
        effect_model=_Pay,
        intent=(),
    )
    found = receipt_mismatch(contract, effect, answer)
    if not differ:
        assert found is None
    else:
        assert found is not None
        assert [n for n in ("amount_minor", "a", "b", "flag", "to") if f"{n} is " in found] == (
            differ
        )


# -- a lookup runs under the tool's timeout ------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_lookup_that_never_answers_leaves_its_step_unknown_and_reconcile_goes_on(
    tmp_path: Path, kind: str
) -> None:
    rig = Rig(tmp_path, timeout=0.2, sync_lookup=kind == "sync")
    hung = await rig.unknown("inv_8")
    other = await rig.unknown("inv_9")
    released = threading.Event()

    def hang_sync(real: Answer, effect: Refund, key: str) -> Any:
        released.wait(10)  # a blocking client in a worker thread: abandoned, not stopped
        return real(effect, key)

    async def hang_async(real: Answer, effect: Refund, key: str) -> Any:
        await anyio.sleep(3600)

    hang = hang_sync if kind == "sync" else hang_async
    rig.lookup_instead = lambda real, effect, key: (
        hang(real, effect, key) if key == hung.key else real(effect, key)
    )
    try:
        started = time.monotonic()
        with anyio.fail_after(5):
            results = await rig.writes.reconcile()
        assert time.monotonic() - started < 2
    finally:
        released.set()
    by_id = {r.preview_id: r for r in results}
    assert (by_id[hung.id].outcome, by_id[hung.id].after) == ("unresolved", "unknown")
    assert "no answer within 0.2 s" in by_id[hung.id].how
    assert rig.state(hung) == "unknown"
    assert rig.state(other) == "committed"  # resolved though the one before it hung
    rig.close()


# -- what the ledger records of an ending holds no secret ----------------------------------


class PayArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    account: Annotated[str, Field(pattern=r"^acc_[0-9]{1,6}$", max_length=10)]
    passphrase: Annotated[str, Secret(), Field(max_length=64)]


class Pay(BaseModel):
    account: str
    passphrase: Annotated[str, Secret()]


class PayDone(BaseModel):
    status: str


PASSPHRASE = "correct-horse-battery"
TOKEN = "sk_live_SECRET123456"
REVEALED = "rk_live_REVEALED98765"
PAY = "bank_payment_create"
PAY_GRANT = Grant(scopes=frozenset({"bank.write"}), effects=(write("bank:**"),))
PAY_ALLOW = ApprovalPolicy((ApprovalRule(id="pay", action="allow", tools=("bank_*",)),))
PAYER = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"bank.write"}))

LEAKS: list[tuple[str, str, Callable[[Pay], BaseException]]] = [
    (
        "authorization header",
        TOKEN,
        lambda e: RuntimeError(f"read timeout; headers {{'Authorization': 'Bearer {TOKEN}'}}"),
    ),
    ("bearer token", TOKEN, lambda e: OSError(f"reset after sending Bearer {TOKEN}")),
    ("secret field, repr", PASSPHRASE, lambda e: ConnectionError(f"reset sending {e!r}")),
    ("secret field, bare", PASSPHRASE, lambda e: ValueError(f"bad value {e.passphrase}")),
    (
        "secret field in a tool error",
        PASSPHRASE,
        lambda e: ToolError(outcome="unknown", detail=f"echo: {e.passphrase}"),
    ),
    ("revealed credential", REVEALED, lambda e: RuntimeError(f"rejected key {REVEALED}")),
    # Across the 200 characters the ledger keeps of the error: redacted before it is cut,
    # else the cut leaves a start of the credential that redaction no longer recognizes.
    ("revealed credential across the cut", REVEALED, lambda e: RuntimeError("p" * 171 + REVEALED)),
]


@pytest.mark.parametrize(("name", "secret", "fail"), LEAKS, ids=[leak[0] for leak in LEAKS])
async def test_an_ending_that_echoes_a_secret_is_recorded_without_it(
    tmp_path: Path, backend: Backend, name: str, secret: str, fail: Callable[[Pay], BaseException]
) -> None:
    def commit(effect: Pay, key: str) -> dict[str, Any]:
        raise fail(effect)

    # Revealed once by the host (never by the tool: it declares no credential), as the REST
    # adapter reveals a token for a request; from then on it is redacted wherever it appears.
    Credential.from_value(REVEALED, name="SETTLING_TEST_KEY").reveal()

    registry = Registry(audit=AuditLog(MemoryAuditStore()))
    registry.register(
        write_tool(
            name=PAY,
            description=(
                "Pay from an account, authorized by its passphrase. Use it when the user asks "
                "to pay. It does not show balances."
            ),
            input_model=PayArgs,
            effect_model=Pay,
            receipt_model=PayDone,
            prepare=lambda args, principal: Pay(account=args.account, passphrase=args.passphrase),
            commit=commit,
            effects=[write("bank:account/{account}")],
            scope="bank.write",
        )
    )
    ledger = open_ledger(backend.url or str(tmp_path))
    writes = WritePath(registry, ledger)
    ctx = CallContext(
        principal=PAYER, grant=PAY_GRANT, run_id="run_1", caller="direct", approvals=PAY_ALLOW
    )
    preview = await writes.preview_call(PAY, {"account": "acc_1", "passphrase": PASSPHRASE}, ctx)

    with pytest.raises(AmbiguousWriteError) as raised:
        await writes.commit(preview.id, preview.fingerprint, PAYER)

    stored = ledger.preview(preview.id)
    assert stored is not None
    assert stored.state == "unknown"
    assert stored.error is not None
    assert "[redacted]" in stored.error
    assert secret not in stored.error
    assert all(secret not in event.how for event in ledger.history(preview.id))
    assert secret[:8] not in stored.error
    where = backend.url or str(tmp_path / "ledger.db")
    assert secret.encode() not in dump_tables(where, LEDGER_TABLES)
    assert all(secret not in (event.detail or "") for event in registry.audit.events())
    if secret == PASSPHRASE:  # (credentials are redacted where the detail is recorded)
        assert secret not in str(raised.value.detail)
    ledger.close()


# -- a commit in flight is no refusal -------------------------------------------------------


async def test_a_commit_that_meets_one_in_flight_may_retry_and_does_not_claim_nothing_happened(
    rig: Rig,
) -> None:
    preview = await rig.prepare("inv_10")
    sending = anyio.Event()
    finish = anyio.Event()

    async def slow(real: Answer, effect: Refund, key: str) -> Any:
        sending.set()
        await finish.wait()
        return real(effect, key)

    rig.commit_instead = slow
    async with anyio.create_task_group() as group:
        group.start_soon(rig.writes.commit, preview.id, preview.fingerprint, ALICE)
        await sending.wait()
        with pytest.raises(ConflictError) as raised:
            await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
        finish.set()

    wire = raised.value.to_wire()
    assert (wire["code"], wire["retryable"], wire["outcome"]) == ("conflict", True, "unknown")
    again = ToolError.from_wire(wire)
    assert type(again) is CommitInFlightError
    assert again.to_wire() == wire
    receipt = await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert receipt.replayed  # the same request, repeated unchanged, succeeds
    assert rig.system.effects() == 1
