"""The wire contract between the guest runner and the host: frame types and shared constants.

Both sides read this one file. The host imports it as ``airlock.bridge.airlock_wire``;
``Dockerfile.sandbox`` copies it unchanged next to the guest runner in the image, where the
guest imports it as the top-level module ``airlock_wire``. It is named like the guest's own
modules (``airlock_runner``, ``airlock_bridge``) so that it has one name on both sides, and
so that its prefix keeps it from shadowing, or being shadowed by, a module a program imports
(the guest's directory is first on its ``sys.path``). Constants only, standard library only:
the guest imports it under ``python3 -I -S`` before any program runs.

Frames are a 4-byte big-endian length (:data:`HEADER_FORMAT`), then that many bytes of ASCII
JSON (other characters as ``\\u`` escapes) holding one object whose ``type`` is one of the
frame types below.

Guest to host: :data:`HELLO` ``{version, pid}`` once the runner is warm; :data:`CALL`
``{id, tool, args}``; :data:`BATCH` ``{id, tool, items}``; :data:`PROPOSE` ``{id, tool,
args}``, a proposal of a write (answered like a call, with ``{preview_id, tool, summary,
state}``; nothing is committed); :data:`CANCEL` ``{id}``, the program cancelled that
awaitable ``call`` or ``propose`` before its result came (the host cancels it if it still
runs, sends no result for it, frees its place among the calls in flight, and keeps no
preview of a proposal it had not answered; an id it does not know, or has answered, changes
nothing; counted as a ``log`` frame is); :data:`LOG` ``{message}``;
:data:`REFUSED` ``{tool}``, once per name, when the program reached for a tool it was not
given (the guest refuses it on the spot; the host records the attempt);
:data:`ARTIFACT` ``{name, offset, data, end}``, after the program, one piece of a file it left
in :data:`OUT_DIR` (``data`` is base64 of at most :data:`ARTIFACT_CHUNK_BYTES`; every piece
but a file's last holds exactly that many); :data:`DONE` ``{result}``. Host to guest:
:data:`RUN` ``{program, mode, allowed_imports, output_limit, value_limit, value_elements,
max_call_frame_bytes, max_in_flight, max_batch_items, deadline_s, tools, artifacts, keep?}``
(a stub in ``tools`` with ``"proposal": true`` is a write the program may propose, under
``tools.propose``);
:data:`RESULT` ``{id, ok, value | error}``; :data:`ABORT` ``{code, message}``. A result's
``error`` is ``{code, message, retryable}`` plus the typed fields :data:`ERRORS` names for
its code.
``value_limit`` (bytes of compact JSON) and ``value_elements`` (values and keys) bound the
program's final value: the host refuses a frame over its budget, so the guest refuses such a
value first, as ``result_too_large``. The host also refuses a frame that nests deeper than
:data:`MAX_DEPTH` or holds an integer of more than :data:`MAX_INT_DIGITS` digits, and a
``call``, ``batch`` or ``propose`` frame over ``max_call_frame_bytes``: the guest refuses such a
call in the program as ``invalid_input`` (nothing is sent) and such a final value as
``InvalidResult``. ``max_in_flight`` and ``max_batch_items`` are the host's limits on calls
unanswered at once and on a batch's items, which end the run: the guest sends no call past
the first ``max_in_flight`` unanswered ones, whatever made it (an awaitable call's frame is
held, a thread's call waits) until answers free their places, and sends a longer batch, or
one whose frame would be over ``max_call_frame_bytes``, as several frames, one after another
(the defaults below when the ``run`` frame does not say). ``deadline_s`` is the guest's own
backstop to the host's deadline: seconds after the ``run`` frame when the guest ends the
program whatever the host does (it is the program's ``timeout_s`` plus a margin past the
host's own handling of its deadline).
``artifacts`` is ``{dir, files, bytes}`` when the host collects the files a program
leaves (at most ``files`` of them, ``bytes`` in all), or ``null``; the guest names each file
by :data:`ARTIFACT_NAME` and the host refuses any other name. ``keep`` (``true``, or
``"clean"`` for a container reused with nothing kept) comes with a one-time ``token``: the
runner then runs each program in a process of its own, on a new connection whose first frame
is :data:`HELLO` ``{version, pid, token}``, and the host serves the program on that
connection only. A kept runner that gives up on its container (it could not clear what a
program left) or fails sends :data:`EXIT` ``{status, reason}`` on its first connection, its
last frame, before it exits with ``status``: the host tells ``reason`` (at most
:data:`MAX_EXIT_REASON_CHARS` characters) to the run that finds the runner gone.

Host code that cannot import this module keeps its own copy of two values, pinned to these by
tests: the default sandbox profile's allowed imports (:data:`WARM_UP_IMPORTS`) and the typed
fields of each ``airlock.tools`` error class (:data:`ERRORS`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

PROTOCOL_VERSION: Final = 5
"""Sent in ``hello``; the host refuses a runner that speaks another version (2: the guest
reports refused tool names; 3: artifacts; 4: proposals of writes; 5: ``cancel`` frames)."""

HELLO: Final = "hello"
CALL: Final = "call"
BATCH: Final = "batch"
PROPOSE: Final = "propose"
LOG: Final = "log"
CANCEL: Final = "cancel"
REFUSED: Final = "refused"
DONE: Final = "done"
RUN: Final = "run"
RESULT: Final = "result"
ABORT: Final = "abort"
ARTIFACT: Final = "artifact"
EXIT: Final = "exit"

HEADER_FORMAT: Final = ">I"
"""The :mod:`struct` format of a frame's length prefix."""
MAX_HOST_FRAME_BYTES: Final = 64 * 1024 * 1024
"""The largest frame body the guest reads from the host; a bigger one ends its connection."""
MAX_LOG_CHARS: Final = 2000
"""Characters of one ``log`` message the guest sends and the host records."""
MAX_DEPTH: Final = 64
"""Levels a frame may nest (the frame's own object is the first): the host refuses a deeper
frame."""
MAX_INT_DIGITS: Final = 30
"""Digits of the largest integer a frame may hold (a sign aside); larger ones travel as text."""
MAX_CALL_FRAME_BYTES: Final = 1024 * 1024
"""The largest ``call``, ``batch`` or ``propose`` frame body the guest sends when its ``run``
frame does not say (``max_call_frame_bytes``: the host's limit for the run)."""
MAX_IN_FLIGHT: Final = 256
"""Calls unanswered at once when the ``run`` frame does not say (``max_in_flight``)."""
MAX_BATCH_ITEMS: Final = 1000
"""Items of one ``batch`` frame when the ``run`` frame does not say (``max_batch_items``)."""
MAX_EXIT_REASON_CHARS: Final = 1000
"""Characters of an ``exit`` frame's ``reason`` the guest sends and the host tells."""
MAX_TOOL_NAME_CHARS: Final = 128
"""Characters of a tool name in a frame; a longer one is cut (``refused``) or refused."""

SOCKET_DIR: Final = "/run/airlock"
"""Where the host mounts the bridge socket's directory inside the container (read-only)."""
SOCKET_NAME: Final = "bridge.sock"
"""The bridge socket's file name in :data:`SOCKET_DIR`."""
DATA_DIR: Final = "/data"
"""Where a run's inputs are mounted read-only, one entry per input: ``/data/NAME``."""
OUT_DIR: Final = "/out"
"""The size-capped tmpfs a program leaves its artifacts in."""
RUN_WAITING: Final = "run-waiting"
"""Given to the runner after the socket's path when a run is already waiting for its
container: a base image's runner then does not warm up for the one program it will run."""
WARM_WHEN_IDLE: Final = "warm-when-idle"
"""Given to the runner after the socket's path when the pool starts its container while runs
find the pool empty: a base image's runner then does not warm up before ``hello``, but once it
has waited idle after it (the burst is over), and stops at the step where its run came."""
IMAGE_MANIFEST: Final = "image.json"
"""A file beside the runner in images that add packages (the data image): what the image is
(``{"image", "packages", "warm_imports"}``); the runner imports ``warm_imports`` while it
warms up. The base image has none."""

ARTIFACT_CHUNK_BYTES: Final = 256 * 1024
"""Bytes of a file in one ``artifact`` frame (before base64)."""
ARTIFACT_NAME: Final = (
    r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9._-]{0,127}){0,7}$"
)
"""An artifact's name: its path under :data:`OUT_DIR`, up to eight parts of letters, digits,
``.``, ``_`` and ``-``, none starting with a dot or a dash (a file named ``--force`` in a
user's directory reads as an option to the commands run there). The guest turns any other
name into one (``a b.png`` -> ``a_b.png``, ``-rf`` -> ``_rf``); the host refuses any other."""

WARM_UP_IMPORTS: Final = frozenset(
    {
        "json", "math", "re", "datetime", "collections", "itertools", "functools",
        "statistics", "decimal", "csv", "asyncio", "typing", "dataclasses",
    }
)  # fmt: skip
"""Modules the runner imports while it warms up, before any ``run`` frame says which profile
applies: the default ``SandboxProfile.allowed_imports``, so that a default program's first
import costs nothing. A profile that allows other modules still works; only their first import
is not paid in advance."""


class ErrorShape:
    """How a tool error of one code looks to a program."""

    __slots__ = ("fields", "name")

    def __init__(self, name: str, fields: tuple[str, ...]) -> None:
        self.name = name
        """The error's class in the program's ``tools`` namespace (``tools.NotFound``)."""
        self.fields = fields
        """Its typed attributes, as the host error class puts them in its wire form."""


ERRORS: Final[Mapping[str, ErrorShape]] = {
    "unknown_tool": ErrorShape("UnknownTool", ("name",)),
    "invalid_input": ErrorShape("InvalidInput", ("issues",)),
    "denied": ErrorShape("Denied", ("reason",)),
    "not_found": ErrorShape("NotFound", ()),
    "conflict": ErrorShape("Conflict", ("requires",)),
    "rate_limited": ErrorShape("RateLimited", ("retry_after",)),
    "upstream": ErrorShape("Upstream", ()),
    "timeout": ErrorShape("Timeout", ("seconds",)),
    "ambiguous_write": ErrorShape("AmbiguousWrite", ("idempotency_key",)),
    "result_too_large": ErrorShape("ResultTooLarge", ("size_bytes", "limit_bytes")),
    "approval_mismatch": ErrorShape("ApprovalMismatch", ()),
    "preview_expired": ErrorShape("PreviewExpired", ()),
    "needs_approval": ErrorShape("NeedsApproval", ("rule", "preview_id")),
    "limit_exceeded": ErrorShape("LimitExceeded", ("limit",)),
    "protocol_error": ErrorShape("ProtocolError", ("reason",)),
}
"""Every tool error code, by the class a program catches and the typed fields it carries."""

NAMESPACE_MEMBERS: Final = frozenset(
    {"ToolError", "log", "propose", *(shape.name for shape in ERRORS.values())}
)
"""Members of a program's ``tools`` namespace that are not tools: ``log()``, ``propose`` (the
writes the program may propose, ``tools.propose.NAME(...)``) and the error classes. No tool
can have one of these names (tool names are lower-case ``a_b_c``)."""
