"""A collector that takes the connection and never answers holds neither an audit log's
close nor the process's exit past :data:`EXIT_FLUSH_S`: the sinks get what is left of it,
then the log (or the process) goes on without them."""

from __future__ import annotations

import socket
import time
import weakref
from collections.abc import Callable, Iterator

import pytest

from airlock.harness._otel import spans_from_environment
from airlock.tools import AuditLog, MemoryAuditStore, _audit_log, _audit_process
from tests.tools.billing import Handled, build_registry, context

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
pytestmark = pytest.mark.anyio

BOUND = 1.0
"""EXIT_FLUSH_S in these tests."""
MARGIN = 3.0


@pytest.fixture
def silent_collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """OTLP pointed at a port that accepts connections and never reads or answers, with an
    exporter that would wait 30 s for each request."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}"
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "30")
    monkeypatch.setattr(_audit_process, "EXIT_FLUSH_S", BOUND)
    monkeypatch.setattr(_audit_log, "EXIT_FLUSH_S", BOUND)
    try:
        yield
    finally:
        listener.close()


async def _exporting_log() -> AuditLog:
    log = AuditLog(MemoryAuditStore())
    assert spans_from_environment(log)
    registry = build_registry(Handled(), audit=log)
    for _ in range(20):
        await registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, context())
    return log


def _close(log: AuditLog) -> None:
    log.close()


def _exit(log: AuditLog) -> None:
    _audit_process._OPEN = weakref.WeakSet([log])
    _audit_process._flush_at_exit()


@pytest.mark.parametrize("ending", [_close, _exit], ids=["close", "exit"])
async def test_a_silent_collector_holds_the_end_no_longer_than_the_exit_bound(
    ending: Callable[[AuditLog], None],
    silent_collector: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_audit_process, "_OPEN", _audit_process._OPEN)  # (restored after)
    log = await _exporting_log()
    started = time.monotonic()
    ending(log)
    assert time.monotonic() - started < BOUND + MARGIN
