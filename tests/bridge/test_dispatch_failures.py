"""A call from code that fails with something other than a tool error: the guest learns
only its class, and the operator log neither its text nor its traceback (either may quote
the call's ``Secret()`` arguments; the registry logs them cleaned)."""

from __future__ import annotations

import logging
from typing import cast

import pytest

from airlock.bridge._dispatch import CallDispatcher
from airlock.bridge._results import ResultWriter
from airlock.bridge._session import BridgeLimits

PIN = "PIN-7731-s3cr3t"


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError(f"invalid literal for int() with base 10: {PIN!r}"),
        KeyError(PIN),
        ValueError(f"bad\nERROR:airlock.bridge:FORGED {PIN}"),
    ],
)
def test_an_unexpected_failure_is_logged_by_its_class_alone(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    dispatcher = CallDispatcher(
        None, BridgeLimits(), deadline=0.0, results=cast(ResultWriter, None)
    )
    with caplog.at_level(logging.DEBUG, logger="airlock"):
        error = dispatcher._failure("vault_item_get\nERROR:forged", exc)
    assert error == {
        "code": "upstream",
        "message": f"the tool failed ({type(exc).__name__})",
        "retryable": True,
    }
    (record,) = caplog.records
    assert record.exc_info is None
    assert PIN not in caplog.text
    assert "FORGED" not in caplog.text
    assert type(exc).__name__ in record.getMessage()
    assert len(record.getMessage().splitlines()) == 1
