"""The guest half of the bridge: the ``tools`` namespace a sandboxed program calls.

Standard library only; shipped in the image next to the runner. Each read tool the run may
use from code becomes a function with a real signature and docstring::

    invoice = tools.billing_invoice_get(invoice_id="in_42")            # one call
    invoices = await asyncio.gather(*(tools.billing_invoice_get.aio(invoice_id=i) for i in ids))
    invoices = tools.billing_invoice_get.batch([{"invoice_id": i} for i in ids])

A write the run may *propose* (its contract and the run's grant allow it) sits under
``tools.propose``; a proposal changes nothing, the host prepares it and its preview waits, with
the program's other proposals, for a person to approve them as one batch::

    handle = tools.propose.billing_refund_create(invoice_id="in_42", reason="duplicate")
    handle["preview_id"], handle["summary"]

A refused or failed call raises the ``airlock_errors`` class of its code, which the program
can inspect (``tools.NotFound``, ``tools.InvalidInput`` with its ``issues``, ...). A tool the
run was not given (a write tool, one hidden from the principal, a name that does not exist) is
``tools.UnknownTool`` as soon as the program reaches for it, the same for each, and nothing is
sent. When the host ends the run (a limit, a protocol error), calls raise ``RunAborted``,
which derives from ``BaseException`` so that ``except Exception:`` in a program cannot swallow
it. Frames and their types are the shared contract in ``airlock_wire``.

The runner imports the connection and the namespace from here; each lives in a module of its
own: ``airlock_frames`` (framing), ``airlock_connection`` (the socket, pending calls and who
reads for them), ``airlock_tool_functions`` (single, awaitable and batched calls of one tool)
and ``airlock_namespace`` (``tools`` and ``tools.propose``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from airlock.sandbox.guest.airlock_bridge_socket import HOST_GONE
    from airlock.sandbox.guest.airlock_connection import Connection
    from airlock.sandbox.guest.airlock_namespace import Proposals, Tools, unknown_tool
    from airlock.sandbox.guest.airlock_tool_functions import ProposalFunction, ToolFunction
else:  # in the image, the guest's modules sit side by side on the runner's path
    from airlock_bridge_socket import HOST_GONE
    from airlock_connection import Connection
    from airlock_namespace import Proposals, Tools, unknown_tool
    from airlock_tool_functions import ProposalFunction, ToolFunction

__all__ = [
    "HOST_GONE",
    "Connection",
    "ProposalFunction",
    "Proposals",
    "ToolFunction",
    "Tools",
    "unknown_tool",
]
