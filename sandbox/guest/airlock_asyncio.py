"""asyncio, imported when the runner or a program first needs it, without ssl.

A runner does not import asyncio until something needs it: its warm-up, a program's top-level
``await``, a tool's ``.aio`` call or a restricted program's ``import asyncio`` (about 7 ms of
CPU that a container started for one program that never awaits does not spend). asyncio
imports ssl, and with it OpenSSL's libraries (about 5 ms of CPU and 1.3 MiB more), for TLS
transports only, which a container without a network never opens: loaded from here, it does
not. A program that imports ssl itself still gets it.

Standard library only; shipped in the image next to the runner.
"""

from __future__ import annotations

import sys


def import_asyncio() -> None:
    """Import asyncio (without ssl) unless something has already: an ``import asyncio``
    after it finds the module loaded."""
    if "asyncio" in sys.modules:
        return
    block_ssl = "ssl" not in sys.modules
    if block_ssl:
        sys.modules["ssl"] = None  # type: ignore[assignment]  # "import ssl" raises ImportError
    try:
        import asyncio  # noqa: F401
    finally:
        if block_ssl:
            del sys.modules["ssl"]


__all__ = ["import_asyncio"]
