"""Audit events as OpenTelemetry spans: every tool call, every program and every write step.

:class:`AuditSpans` is an :class:`~airlock.tools.AuditSink`: once a batch of events is
stored, it makes one span per event through the OpenTelemetry API, on the audit log's
writer thread. Spans of one run share a trace (its id is derived from the run id), so a
tracing backend shows a run's programs, calls and writes together. Attributes::

    airlock.run_id  airlock.call_id  airlock.caller  airlock.tool  airlock.principal
    enduser.id  airlock.tenant_id  airlock.effects  airlock.outcome  airlock.code
    airlock.stage  airlock.decision  airlock.rule  airlock.args_hash  airlock.approver
    airlock.final  airlock.exercised

(``airlock.args_hash`` of a program is its hash: ``airlock audit program HASH`` prints it.)
A call whose outcome is ``error`` or ``unknown`` has status ``ERROR``.

:func:`spans_from_environment` exports them over OTLP/HTTP when the standard variable
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; it needs
the ``otel`` extra (``pip install 'airlock[otel]'``).
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airlock._extras import requires_extra
from airlock.harness._execute_code import EXECUTE_CODE
from airlock.tools import AuditEvent, AuditLog

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["AuditSpans", "spans_from_environment"]

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_EXPORTING: weakref.WeakSet[AuditLog] = weakref.WeakSet()


class AuditSpans:
    """One OpenTelemetry span per stored audit event (an :class:`~airlock.tools.AuditSink`).

    Args:
        tracer_provider: where spans go; the global provider when omitted.
        owns_provider: shut the provider down when the audit log closes (for a provider
            made only for this sink).

    Add it with ``registry.audit.add_sink(AuditSpans(provider))``.

    Raises:
        MissingExtraError: the OpenTelemetry API is not installed (the ``otel`` extra).
    """

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, owns_provider: bool = False
    ) -> None:
        with requires_extra("otel", feature="audit spans (AuditSpans)"):
            from opentelemetry import trace
        self._trace = trace
        self._provider = tracer_provider
        self._owns = owns_provider
        self._tracer = trace.get_tracer("airlock.audit", tracer_provider=tracer_provider)

    def emit(self, events: Sequence[AuditEvent]) -> None:
        """One span per event, ended at the event's time."""
        trace = self._trace
        for event in events:
            end = int(event.ts * 1e9)
            span = self._tracer.start_span(
                _span_name(event),
                context=self._run_context(event.run_id),
                kind=trace.SpanKind.INTERNAL,
                attributes=_attributes(event),
                start_time=end - int(max(event.duration_s, 0.0) * 1e9),
            )
            if event.outcome in ("error", "unknown"):
                span.set_status(trace.Status(trace.StatusCode.ERROR, event.code or event.outcome))
            span.end(end_time=end)

    def close(self) -> None:
        """Send what is buffered; shut the provider down when this sink owns it."""
        provider: Any = self._provider
        if provider is None:
            return
        if self._owns and hasattr(provider, "shutdown"):
            provider.shutdown()
        elif hasattr(provider, "force_flush"):  # the SDK's provider; the API's has none
            provider.force_flush()

    def _run_context(self, run_id: str) -> Any:
        trace = self._trace
        digest = hashlib.blake2b(run_id.encode("utf-8", "replace"), digest_size=24).digest()
        parent = trace.SpanContext(
            trace_id=int.from_bytes(digest[:16], "big") or 1,
            span_id=int.from_bytes(digest[16:], "big") or 1,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
        return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def _span_name(event: AuditEvent) -> str:
    if event.tool == EXECUTE_CODE and event.final:
        return "airlock.program"
    return "airlock.tool_call" if event.final else "airlock.write_step"


def _attributes(event: AuditEvent) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "airlock.run_id": event.run_id,
        "airlock.call_id": event.call_id,
        "airlock.caller": event.caller,
        "airlock.tool": event.tool,
        "airlock.principal": f"{event.user_id}@{event.tenant_id}",
        "enduser.id": event.user_id,
        "airlock.tenant_id": event.tenant_id,
        "airlock.effects": list(event.effects),
        "airlock.outcome": event.outcome,
        "airlock.stage": event.stage,
        "airlock.decision": event.decision,
        "airlock.rule": event.rule,
        "airlock.args_hash": event.args_hash,
        "airlock.final": event.final,
        "airlock.exercised": event.exercised,
    }
    if event.code is not None:
        attributes["airlock.code"] = event.code
    if event.approver is not None:
        attributes["airlock.approver"] = event.approver
    return attributes


def spans_from_environment(log: AuditLog) -> bool:
    """Export ``log``'s events as spans over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT``
    (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set, once per log; whether it does.
    The exporter reads the other standard ``OTEL_EXPORTER_OTLP_*`` variables (headers,
    timeout) itself; ``OTEL_SERVICE_NAME`` names the service (default ``airlock``).

    Raises:
        MissingExtraError: OTLP is configured and the ``otel`` extra is not installed.
    """
    if not any(os.environ.get(name) for name in _ENDPOINTS) or log in _EXPORTING:
        return log in _EXPORTING
    feature = "exporting audit spans over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT is set)"
    with requires_extra("otel", feature=feature):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    name = os.environ.get("OTEL_SERVICE_NAME") or "airlock"
    provider = SDKTracerProvider(
        resource=Resource.create({"service.name": name}), shutdown_on_exit=False
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    log.add_sink(AuditSpans(provider, owns_provider=True))
    _EXPORTING.add(log)
    return True
