"""Fault switches of the billing service, settable by the host, tests or the demo.

Each switch fires for the next ``times`` matching requests (``None``: until cleared), and
counts how often it fired::

    faults.delay(0.5)                       # every route waits before answering
    faults.delay(0.5, phase="commit")       # a refund waits with its key in flight
    faults.drop_after_commit()              # a refund commits, then its response is cut off
    faults.rate_limit(retry_after=0.1)      # 429 with Retry-After
    faults.unavailable(status=503)          # 503 (or 502/504) before anything happens
    faults.redirect("http://127.0.0.1:9/")  # 302 to another host
    faults.oversize(2_000_000)              # the answer carries that many extra bytes

A service in another process takes the same switches as JSON on ``POST /_admin/faults``
(:class:`FaultSpec`), with the admin token.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["FaultKind", "FaultSpec", "Faults"]

FaultKind = Literal[
    "delay", "drop_after_commit", "rate_limit", "unavailable", "redirect", "oversize"
]


class FaultSpec(BaseModel):
    """One armed switch: what it does, where, and how many more times."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FaultKind = Field(description="What goes wrong.")
    times: int | None = Field(default=1, ge=1, description="Requests it fires for; null: all.")
    path: str = Field(default="/", max_length=200, description="Only paths with this prefix.")
    method: str | None = Field(default=None, description="Only this method (GET, POST).")
    seconds: float = Field(default=0.0, ge=0, le=60, description="delay: how long.")
    phase: Literal["request", "commit"] = Field(
        default="request", description="delay: before handling, or with the refund key held."
    )
    status: int = Field(default=503, description="unavailable: 502, 503 or 504; redirect: 3xx.")
    retry_after: float = Field(default=0.05, ge=0, le=3600, description="rate_limit: seconds.")
    location: str = Field(default="", max_length=500, description="redirect: the target URL.")
    size_bytes: int = Field(default=0, ge=0, le=64_000_000, description="oversize: extra bytes.")

    def matches(self, method: str, path: str) -> bool:
        return path.startswith(self.path) and self.method in (None, method)


class Faults:
    """The armed switches of one service; thread-safe (the host arms, the server fires)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: list[list[object]] = []  # [spec, remaining or None]
        self.fired: Counter[str] = Counter()
        """How many times each kind of fault fired."""

    def arm(self, spec: FaultSpec) -> FaultSpec:
        """Arm ``spec``; the named helpers below call this."""
        with self._lock:
            self._armed.append([spec, spec.times])
        return spec

    def delay(
        self,
        seconds: float,
        *,
        phase: Literal["request", "commit"] = "request",
        times: int | None = 1,
        path: str = "/",
        method: str | None = None,
    ) -> FaultSpec:
        """Wait ``seconds``: before handling, or (``commit``) with a refund's key in flight."""
        return self.arm(
            FaultSpec(
                kind="delay", seconds=seconds, phase=phase, times=times, path=path, method=method
            )
        )

    def drop_after_commit(self, *, times: int | None = 1) -> FaultSpec:
        """Commit the next refund, then cut its response off mid-body (the client sees the
        connection close: did it happen? only the key can tell)."""
        return self.arm(FaultSpec(kind="drop_after_commit", times=times, path="/v1/refunds"))

    def rate_limit(
        self, *, retry_after: float = 0.05, times: int | None = 1, path: str = "/"
    ) -> FaultSpec:
        """Answer 429 with ``Retry-After: retry_after`` before handling."""
        return self.arm(
            FaultSpec(kind="rate_limit", retry_after=retry_after, times=times, path=path)
        )

    def unavailable(
        self, *, status: int = 503, times: int | None = 1, path: str = "/"
    ) -> FaultSpec:
        """Answer ``status`` (502, 503 or 504) before handling: nothing happens."""
        if status not in (500, 502, 503, 504):
            raise ValueError(f"status {status!r} must be 500, 502, 503 or 504")
        return self.arm(FaultSpec(kind="unavailable", status=status, times=times, path=path))

    def redirect(
        self, location: str, *, status: int = 302, times: int | None = 1, path: str = "/"
    ) -> FaultSpec:
        """Answer ``status`` with ``Location: location`` (another host, say) before handling."""
        if not 300 <= status <= 399:
            raise ValueError(f"status {status!r} must be a 3xx redirect")
        return self.arm(
            FaultSpec(kind="redirect", location=location, status=status, times=times, path=path)
        )

    def oversize(self, size_bytes: int, *, times: int | None = 1, path: str = "/") -> FaultSpec:
        """Pad the next successful answer with ``size_bytes`` extra bytes."""
        return self.arm(FaultSpec(kind="oversize", size_bytes=size_bytes, times=times, path=path))

    def clear(self) -> None:
        """Disarm every switch (the counts of fired faults stay)."""
        with self._lock:
            self._armed.clear()

    def take(
        self, kind: FaultKind, method: str, path: str, *, phase: str | None = None
    ) -> FaultSpec | None:
        """The first armed ``kind`` switch matching the request, used up by one; or ``None``."""
        with self._lock:
            for entry in self._armed:
                spec, remaining = entry
                assert isinstance(spec, FaultSpec)
                if spec.kind != kind or not spec.matches(method, path):
                    continue
                if phase is not None and spec.phase != phase:
                    continue
                if isinstance(remaining, int):
                    if remaining <= 1:
                        self._armed.remove(entry)
                    else:
                        entry[1] = remaining - 1
                self.fired[kind] += 1
                return spec
        return None
