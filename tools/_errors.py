"""Errors of a tool call: one root, one class per stable code.

    AirlockError                      (policies)
    └── ToolError                     code, retryable, outcome; to_wire() / from_wire()
        ├── UnknownToolError          unknown_tool      missing, hidden or wrong caller
        ├── InvalidInputError         invalid_input     .issues: field and reason
        ├── DeniedError               denied            .reason: scope | effect | spend | policy
        ├── NotFoundError             not_found         missing, or another tenant's record
        ├── ConflictError             conflict          .requires: evidence a call lacks
        │   ├── CommitInFlightError   conflict          another commit is sending it  retryable
        │   └── ReceiptMismatchError  conflict          another change's answer under its key
        ├── RateLimitedError          rate_limited      .retry_after seconds        retryable
        ├── UpstreamError             upstream          the system behind the tool   retryable
        │   └── PermanentUpstreamError upstream         fails the same way every time
        ├── ToolTimeoutError          timeout           .seconds                    retryable
        ├── AmbiguousWriteError       ambiguous_write   .idempotency_key            retryable
        ├── ResultTooLargeError       result_too_large  .size_bytes, .limit_bytes
        ├── ApprovalMismatchError     approval_mismatch
        ├── PreviewExpiredError       preview_expired
        ├── NeedsApprovalError        needs_approval    .rule, .preview_id
        ├── LimitExceededError        limit_exceeded    .limit
        └── ProtocolError             protocol_error    .reason
    └── LedgerError                   ledger_error      .path, .store: a durable store failed
        ├── LedgerUnavailableError    ledger_unavailable   cannot be opened (a directory...)
        │   └── AuditUnavailableError ledger_unavailable   the audit log cannot store now
        │                                                  (in _audit_writer)  retryable
        ├── LedgerNotADatabaseError   ledger_not_database  not an SQLite file, or not this store's
        ├── LedgerCorruptError        ledger_corrupt       malformed or truncated
        ├── LedgerReadOnlyError       ledger_readonly      the file or its folder is read-only
        ├── LedgerLockedError         ledger_locked        held by another process  retryable
        ├── LedgerIOError             ledger_io            the disk failed or is full  retryable
        ├── LedgerReplacedError       ledger_replaced      deleted or replaced while open
        └── LedgerClosedError         ledger_closed        closed by this process

``code`` and ``retryable`` (the same request may succeed later unchanged) are class facts;
two codes have two classes each, told apart by the wire form's ``retryable`` in
:meth:`ToolError.from_wire`: :class:`CommitInFlightError` is the one ``conflict`` that is
retryable (the same commit, repeated, returns the receipt once the send in flight ends), and
:class:`PermanentUpstreamError` the one ``upstream`` that is not (a request the tool cannot
build, an answer it cannot read: the same call fails the same way again).
``outcome`` is per instance: ``"error"`` means known and nothing committed, ``"unknown"`` means
the tool may have acted (it raised something unexpected or ran out of time), so the caller
must not assume either way. The wire form carries only what the model may see: code,
message, retryable, outcome and typed attributes (:meth:`ToolError.wire_fields`).
:attr:`ToolError.detail` is for the operator log and never leaves the host.

:class:`LedgerError` is the other branch: the ledger (or the audit store, which shares its
SQLite layer) cannot be used. It never crosses to the model or a guest; it names the file and
says what to do, and :data:`LEDGER_ERRORS` lists its classes by code.

The whole tree is one module, over the usual size, on purpose: each class is a few lines of
one pattern, and the wire form (:meth:`ToolError.from_wire` over every code) needs them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, get_args

from airlock.policies import AirlockError
from airlock.tools._json import JSONObject, JSONValue

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "ERROR_CODES",
    "LEDGER_ERRORS",
    "AmbiguousWriteError",
    "ApprovalMismatchError",
    "CommitInFlightError",
    "ConflictError",
    "DeniedError",
    "ErrorCode",
    "FieldIssue",
    "InvalidInputError",
    "LedgerClosedError",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerErrorCode",
    "LedgerIOError",
    "LedgerLockedError",
    "LedgerNotADatabaseError",
    "LedgerReadOnlyError",
    "LedgerReplacedError",
    "LedgerUnavailableError",
    "LimitExceededError",
    "NeedsApprovalError",
    "NotFoundError",
    "Outcome",
    "PermanentUpstreamError",
    "PreviewExpiredError",
    "ProtocolError",
    "RateLimitedError",
    "ReceiptMismatchError",
    "ResultTooLargeError",
    "ToolError",
    "ToolTimeoutError",
    "UnknownToolError",
    "UpstreamError",
]

ErrorCode = Literal[
    "unknown_tool",
    "invalid_input",
    "denied",
    "not_found",
    "conflict",
    "rate_limited",
    "upstream",
    "timeout",
    "ambiguous_write",
    "result_too_large",
    "approval_mismatch",
    "preview_expired",
    "needs_approval",
    "limit_exceeded",
    "protocol_error",
]
ERROR_CODES: tuple[ErrorCode, ...] = get_args(ErrorCode)

Outcome = Literal["ok", "error", "unknown"]
"""How a call ended: ``ok``; ``error`` (known, nothing committed); ``unknown`` (may have acted)."""

_MAX_MESSAGE = 500
_WireFields = dict[str, tuple[type, ...]]


class ToolError(AirlockError):
    """A tool call failed. Subclasses fix ``code`` and ``retryable``; see the module tree."""

    code: ClassVar[ErrorCode]
    retryable: ClassVar[bool] = False
    default_message: ClassVar[str] = "the tool call failed"
    default_outcome: ClassVar[Literal["error", "unknown"]] = "error"
    _fields: ClassVar[_WireFields] = {}
    """Typed attributes in the wire form, with the JSON types each may take."""

    def __init__(
        self,
        message: str | None = None,
        *,
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        self.message = (message or self.default_message)[:_MAX_MESSAGE]
        self.outcome: Literal["error", "unknown"] = outcome or self.default_outcome
        self.detail = detail
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_wire(self) -> JSONObject:
        """The form that crosses to the model or another process (never :attr:`detail`)."""
        wire: JSONObject = {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "outcome": self.outcome,
        }
        for name in self._fields:
            wire[name] = self._field_to_wire(name)
        return wire

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> ToolError:
        """Rebuild an error from :meth:`to_wire` output; anything malformed is a ProtocolError."""
        code = data.get("code")
        target = _BY_CODE.get(code) if isinstance(code, str) else None
        message = data.get("message")
        outcome = data.get("outcome", "error")
        if target is None or not isinstance(message, str) or outcome not in ("error", "unknown"):
            return ProtocolError(reason="malformed error frame")
        target = _BY_RETRYABLE.get((target, data.get("retryable")), target)
        try:
            kwargs = {
                name: target._field_from_wire(name, data.get(name)) for name in target._fields
            }
            return target(message, outcome=outcome, **kwargs)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return ProtocolError(reason=f"malformed attributes in a {code!r} error frame")

    @classmethod
    def wire_fields(cls) -> tuple[str, ...]:
        """Names of the typed attributes in this error's wire form (besides the common keys)."""
        return tuple(cls._fields)

    def _field_to_wire(self, name: str) -> JSONValue:
        value: JSONValue = getattr(self, name)
        return value

    @classmethod
    def _field_from_wire(cls, name: str, value: object) -> object:
        if type(value) not in cls._fields[name]:
            raise TypeError(f"{name}: {type(value).__name__} is not allowed")
        return value


class UnknownToolError(ToolError):
    """No tool of that name is available to this principal from this caller.

    Missing, hidden and wrong-caller tools all raise this, identically, so nothing can be
    learnt by probing names.
    """

    code = "unknown_tool"
    _fields: ClassVar[_WireFields] = {"name": (str,)}

    def __init__(
        self,
        message: str | None = None,
        *,
        name: str,
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        self.name = name[:64]
        super().__init__(
            message
            or f"no tool named {self.name!r} is available; use one of the tools you were given",
            outcome=outcome,
            detail=detail,
        )


@dataclass(frozen=True, slots=True)
class FieldIssue:
    """One problem with one argument: where (dotted path) and what to change."""

    field: str
    reason: str


class InvalidInputError(ToolError):
    """The arguments do not fit the tool's input model; :attr:`issues` says where and why."""

    code = "invalid_input"
    default_message = "the arguments are invalid; fix the listed fields and call again"
    _fields: ClassVar[_WireFields] = {"issues": (list,)}

    def __init__(
        self,
        message: str | None = None,
        *,
        issues: tuple[FieldIssue, ...] = (),
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        self.issues = tuple(issues)[:20]
        if message is None and self.issues:
            listed = "; ".join(f"{i.field or '(arguments)'}: {i.reason}" for i in self.issues)
            message = f"invalid arguments: {listed}"
        super().__init__(message, outcome=outcome, detail=detail)

    def _field_to_wire(self, name: str) -> JSONValue:
        return [{"field": i.field, "reason": i.reason} for i in self.issues]

    @classmethod
    def _field_from_wire(cls, name: str, value: object) -> object:
        if not isinstance(value, list):
            raise TypeError("issues must be a list")
        issues = []
        for item in value:
            if not isinstance(item, dict):
                raise TypeError("an issue must be an object")
            field, reason = item.get("field"), item.get("reason")
            if not isinstance(field, str) or not isinstance(reason, str):
                raise TypeError("an issue needs string field and reason")
            issues.append(FieldIssue(field, reason))
        return tuple(issues)


DenialReason = Literal["scope", "effect", "spend", "policy"]


class DeniedError(ToolError):
    """The run's grant or policy does not allow this call; the run should not insist."""

    code = "denied"
    default_message = "this call is not permitted for you; do not retry it"
    _fields: ClassVar[_WireFields] = {"reason": (str,)}

    def __init__(
        self,
        message: str | None = None,
        *,
        reason: str = "policy",
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        if reason not in get_args(DenialReason):
            raise ValueError(f"denial reason {reason!r} is not one of {get_args(DenialReason)}")
        self.reason = reason
        super().__init__(message, outcome=outcome, detail=detail)


class NotFoundError(ToolError):
    """No such record, or one the principal may not see; the two are indistinguishable."""

    code = "not_found"
    default_message = "no such record; check the id, or look it up first"


class ConflictError(ToolError):
    """The call conflicts with the state of the run or the record (e.g. missing evidence)."""

    code = "conflict"
    _fields: ClassVar[_WireFields] = {"requires": (str, type(None))}

    def __init__(
        self,
        message: str | None = None,
        *,
        requires: str | None = None,
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        self.requires = requires
        super().__init__(
            message or (f"call {requires!r} for the same record first" if requires else None),
            outcome=outcome,
            detail=detail,
        )


class CommitInFlightError(ConflictError):
    """Another commit of the same preview is sending it now: it may already have happened,
    so the outcome is ``unknown``; the same commit, repeated shortly, returns its receipt
    (or this again while the send runs)."""

    retryable = True
    default_outcome = "unknown"
    default_message = "a commit of this change is in flight; ask again shortly"


class ReceiptMismatchError(ConflictError):
    """The system of record answers for another change under this change's key: the step is
    ``unknown``, never committed on that answer, and no commit sends it again (the same key
    would only fetch the same answer, or act with nobody having looked): an operator looks at
    the system of record, and ``airlock reconcile`` settles the step against it."""

    default_outcome = "unknown"
    default_message = (
        "the system of record answers for another change under this change's key; it is "
        "not recorded as committed. Do not retry: an operator must look at it"
    )


class RateLimitedError(ToolError):
    """Too many calls; wait :attr:`retry_after` seconds (when known) and try again."""

    code = "rate_limited"
    retryable = True
    default_message = "rate limited; wait and try again"
    _fields: ClassVar[_WireFields] = {"retry_after": (float, int, type(None))}

    def __init__(
        self,
        message: str | None = None,
        *,
        retry_after: float | None = None,
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        self.retry_after = retry_after
        super().__init__(message, outcome=outcome, detail=detail)


class UpstreamError(ToolError):
    """The system behind the tool failed; the detail stays in the operator log."""

    code = "upstream"
    retryable = True
    default_message = "the service behind this tool failed; try again later"


class PermanentUpstreamError(UpstreamError):
    """The system behind the tool fails this call the same way every time (a request the
    tool cannot build, an answer it cannot read): retrying it unchanged is no use."""

    retryable = False
    default_message = "the service behind this tool cannot serve this call; do not retry it"


class ToolTimeoutError(ToolError):
    """The call ran past its deadline; it may have acted, so its outcome is unknown."""

    code = "timeout"
    retryable = True
    default_outcome = "unknown"
    _fields: ClassVar[_WireFields] = {"seconds": (float, int)}

    def __init__(
        self,
        message: str | None = None,
        *,
        seconds: float,
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
        handler_running: asyncio.Future[None] | None = None,
    ) -> None:
        self.seconds = round(seconds, 3)
        self._handler_running = handler_running
        super().__init__(
            message or f"the tool did not answer within {self.seconds:g} s; do not assume it ran",
            outcome=outcome,
            detail=detail,
        )

    @property
    def handler_running(self) -> asyncio.Future[None] | None:
        """On the host only, never in the wire form: the call gave up on its sync code's
        worker thread, which runs on (it cannot be stopped) until this future is done.

        Each read is a new future of the reader's own (:func:`asyncio.shield` of the
        thread's end): cancelling it, as a wait with a timeout does, leaves the thread's end
        to everyone else who waits for it."""
        running = self._handler_running
        if running is None:
            return None
        import asyncio  # (loaded already wherever there is a future; this module needs none)

        return asyncio.shield(running)


class AmbiguousWriteError(ToolError):
    """A write may or may not have happened; resend with the same key or reconcile."""

    code = "ambiguous_write"
    retryable = True
    default_outcome = "unknown"
    default_message = "the write may have happened; retry with the same key, never a new one"
    _fields: ClassVar[_WireFields] = {"idempotency_key": (str, type(None))}

    def __init__(
        self,
        message: str | None = None,
        *,
        idempotency_key: str | None = None,
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        self.idempotency_key = idempotency_key
        super().__init__(message, outcome=outcome, detail=detail)


class ResultTooLargeError(ToolError):
    """The shaped result is over the tool's byte cap; it is refused, never truncated."""

    code = "result_too_large"
    _fields: ClassVar[_WireFields] = {"size_bytes": (int,), "limit_bytes": (int,)}

    def __init__(
        self,
        message: str | None = None,
        *,
        size_bytes: int,
        limit_bytes: int,
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes
        super().__init__(
            message
            or f"the result is {size_bytes} bytes, over the {limit_bytes} byte limit; "
            "ask for fewer records or narrower fields",
            outcome=outcome,
            detail=detail,
        )


class ApprovalMismatchError(ToolError):
    """The approved fingerprint is not the preview's; approve the preview as shown."""

    code = "approval_mismatch"
    default_message = "the approval does not match this preview; request a new approval"


class PreviewExpiredError(ToolError):
    """The preview is past its expiry; prepare it again."""

    code = "preview_expired"
    default_message = "the preview expired; prepare the change again"


class NeedsApprovalError(ToolError):
    """A person (or policy) must approve before this goes ahead."""

    code = "needs_approval"
    default_message = "this call needs approval; wait for a person to approve it"
    _fields: ClassVar[_WireFields] = {"rule": (str, type(None)), "preview_id": (str, type(None))}

    def __init__(
        self,
        message: str | None = None,
        *,
        rule: str | None = None,
        preview_id: str | None = None,
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        self.rule = rule
        self.preview_id = preview_id
        super().__init__(message, outcome=outcome, detail=detail)


class LimitExceededError(ToolError):
    """A run limit (calls, bytes, spend, time budget) is used up."""

    code = "limit_exceeded"
    _fields: ClassVar[_WireFields] = {"limit": (str,)}

    def __init__(
        self,
        message: str | None = None,
        *,
        limit: str,
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        self.limit = limit
        super().__init__(
            message or f"the run's {limit} limit is used up; finish with what you have",
            outcome=outcome,
            detail=detail,
        )


class ProtocolError(ToolError):
    """A frame or message broke the protocol; the run ends."""

    code = "protocol_error"
    default_message = "protocol error; the run was stopped"
    _fields: ClassVar[_WireFields] = {"reason": (str,)}

    def __init__(
        self,
        message: str | None = None,
        *,
        reason: str,
        outcome: Literal["error", "unknown"] | None = None,
        detail: str | None = None,
    ) -> None:
        self.reason = reason[:200]
        message = message or f"protocol error: {self.reason}"
        super().__init__(message, outcome=outcome, detail=detail)


_BY_CODE: dict[str, type[ToolError]] = {
    cls.code: cls
    for cls in (
        UnknownToolError,
        InvalidInputError,
        DeniedError,
        NotFoundError,
        ConflictError,
        RateLimitedError,
        UpstreamError,
        ToolTimeoutError,
        AmbiguousWriteError,
        ResultTooLargeError,
        ApprovalMismatchError,
        PreviewExpiredError,
        NeedsApprovalError,
        LimitExceededError,
        ProtocolError,
    )
}
# The wire's ``retryable`` picks the subclass of the codes that have two (see the docstring).
_BY_RETRYABLE: dict[tuple[type[ToolError], object], type[ToolError]] = {
    (ConflictError, True): CommitInFlightError,
    (UpstreamError, False): PermanentUpstreamError,
}


LedgerErrorCode = Literal[
    "ledger_error",
    "ledger_unavailable",
    "ledger_not_database",
    "ledger_corrupt",
    "ledger_readonly",
    "ledger_locked",
    "ledger_io",
    "ledger_replaced",
    "ledger_closed",
]


class LedgerError(AirlockError):
    """A durable store (the ledger, or the audit store) cannot be used as asked.

    The message names the file (:attr:`path`) and the problem, and says what to do;
    :attr:`store` is what the file is (``"the ledger"``, ``"the audit store"``). Nothing was
    written by the operation that raised it.
    """

    code: ClassVar[LedgerErrorCode] = "ledger_error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, path: str, store: str = "the ledger") -> None:
        self.message = message
        self.path = path
        self.store = store
        super().__init__(message)


class LedgerUnavailableError(LedgerError):
    """The file cannot be opened: it is a directory, its folder is missing, or it may not be
    read."""

    code = "ledger_unavailable"


class LedgerNotADatabaseError(LedgerError):
    """The file is not an SQLite database, is empty where one must exist, or is another
    program's database."""

    code = "ledger_not_database"


class LedgerCorruptError(LedgerError):
    """SQLite found the file malformed or truncated."""

    code = "ledger_corrupt"


class LedgerReadOnlyError(LedgerError):
    """The file, or the folder SQLite keeps its journal in, cannot be written."""

    code = "ledger_readonly"


class LedgerLockedError(LedgerError):
    """Another process held the file's lock longer than the store waits for it."""

    code = "ledger_locked"
    retryable = True


class LedgerIOError(LedgerError):
    """The disk failed or is full; the same operation may succeed once it is fixed."""

    code = "ledger_io"
    retryable = True


class LedgerReplacedError(LedgerError):
    """The file was deleted or replaced while the store had it open; the operation wrote
    nothing, and nothing may be sent on the strength of the old file."""

    code = "ledger_replaced"


class LedgerClosedError(LedgerError):
    """This process closed the store (an application shutting down) while an operation still
    used it: nothing more can be recorded in it, and what that operation did is as its
    caller is told (an ``ambiguous_write`` stays one)."""

    code = "ledger_closed"


LEDGER_ERRORS: dict[LedgerErrorCode, type[LedgerError]] = {
    cls.code: cls
    for cls in (
        LedgerError,
        LedgerUnavailableError,
        LedgerNotADatabaseError,
        LedgerCorruptError,
        LedgerReadOnlyError,
        LedgerLockedError,
        LedgerIOError,
        LedgerReplacedError,
        LedgerClosedError,
    )
}
"""Every :class:`LedgerError` class by its code."""
