"""The contract between guest and host: what the guest keeps is what the host expects.

The guest reads the shared ``airlock_wire`` from the image; the host imports
``airlock.bridge.airlock_wire``, so the protocol version and the frame types have one
definition, and the image's copy is checked against the host's file. Where host code cannot
import the contract (``policies`` sits below ``bridge``; the error classes live in ``tools``)
or the guest defines its own classes, the values are pinned here.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

import airlock.bridge
import airlock.tools
from airlock.bridge import BridgeLimits, airlock_wire
from airlock.policies import SandboxProfile
from airlock.tools import ERROR_CODES, NAME_PATTERN, ToolError
from tests.conftest import Sandbox
from tests.sandbox.guest_image import ROOT, dockerfile_lines, image_sources, load_guest

wire = load_guest("airlock_wire")
errors = load_guest("airlock_errors")
bridge = load_guest("airlock_bridge")


def _host_error_classes() -> dict[str, type[ToolError]]:
    exported = (getattr(airlock.tools, name) for name in airlock.tools.__all__)
    return {
        cls.code: cls
        for cls in exported
        if isinstance(cls, type) and issubclass(cls, ToolError) and "code" in vars(cls)
    }


def _dockerfile(instruction: str) -> str:
    (line,) = [line for line in dockerfile_lines() if line.startswith(instruction + " ")]
    return line.removeprefix(instruction + " ")


# (name, what the guest holds, what the host holds): each pair must be equal.
PINS: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    # Warm-up runs before the run frame says which profile applies: it imports the default's.
    ("warm_up_imports", lambda: wire.WARM_UP_IMPORTS, lambda: SandboxProfile().allowed_imports),
    # What the guest holds calls to when a run frame does not say: the host's defaults.
    ("max_in_flight", lambda: wire.MAX_IN_FLIGHT, lambda: BridgeLimits().max_in_flight),
    ("max_batch_items", lambda: wire.MAX_BATCH_ITEMS, lambda: BridgeLimits().max_batch_items),
    ("error_codes", lambda: sorted(errors.ERRORS), lambda: sorted(ERROR_CODES)),
    ("error_fields",
     lambda: {code: shape.fields for code, shape in wire.ERRORS.items()},
     lambda: {code: cls.wire_fields() for code, cls in _host_error_classes().items()}),
    ("error_classes",
     lambda: {code: cls.__name__ for code, cls in errors.ERRORS.items()},
     lambda: {code: shape.name for code, shape in airlock_wire.ERRORS.items()}),
    ("namespace_members",
     lambda: {name for name in vars(bridge.Tools) if not name.startswith("_")},
     lambda: airlock.bridge.NAMESPACE_MEMBERS),
    ("namespace_errors",
     lambda: {name: getattr(bridge.Tools, name) for name in wire.NAMESPACE_MEMBERS - {"log", "propose"}},
     lambda: {cls.__name__: cls for cls in [errors.ToolError, *errors.ERRORS.values()]}),
    ("socket_path",
     lambda: _dockerfile("CMD"),
     lambda: json.dumps([f"{airlock_wire.SOCKET_DIR}/{airlock_wire.SOCKET_NAME}"])),
]  # fmt: skip


@pytest.mark.parametrize(("name", "guest", "host"), PINS, ids=[p[0] for p in PINS])
def test_the_guest_agrees_with_the_host(
    name: str, guest: Callable[[], Any], host: Callable[[], Any]
) -> None:
    assert guest() == host()


def test_the_image_holds_the_guest_modules_and_the_contract() -> None:
    names = {source.name for source in image_sources()}
    assert {"airlock_runner.py", "airlock_bridge.py", "airlock_wire.py"} <= names
    allowed = [
        line[1:] for line in (ROOT / ".dockerignore").read_text().splitlines() if line[:1] == "!"
    ]
    for source in image_sources():
        path = str(source.relative_to(ROOT))
        assert any(fnmatch.fnmatch(path, pattern) for pattern in allowed), path


def test_frame_types_are_the_strings_on_the_wire() -> None:
    # Changing one breaks every image built before: it takes a new PROTOCOL_VERSION.
    types = {
        name: getattr(airlock_wire, name)
        for name in (
            "HELLO", "RUN", "CALL", "BATCH", "LOG", "REFUSED", "RESULT", "ABORT", "DONE", "ARTIFACT",
            "PROPOSE", "CANCEL", "EXIT",
        )
    }  # fmt: skip
    assert types == {
        "ARTIFACT": "artifact",
        "HELLO": "hello",
        "RUN": "run",
        "CALL": "call",
        "BATCH": "batch",
        "LOG": "log",
        "REFUSED": "refused",
        "RESULT": "result",
        "ABORT": "abort",
        "DONE": "done",
        "PROPOSE": "propose",
        "CANCEL": "cancel",
        "EXIT": "exit",
    }


@pytest.mark.parametrize("member", sorted(airlock_wire.NAMESPACE_MEMBERS))
def test_no_tool_can_be_named_like_a_namespace_member(member: str) -> None:
    # A tool of that name would be shadowed by the member in the program's namespace.
    assert re.match(NAME_PATTERN, member) is None


def test_a_guest_error_refuses_a_field_its_code_lacks() -> None:
    with pytest.raises(TypeError, match="'not_found' error has no field 'retry_after'"):
        errors.NotFound("m", retry_after=1)


@pytest.mark.docker
def test_the_image_ships_the_hosts_contract(sandbox: Sandbox) -> None:
    result = sandbox.run(
        "import hashlib\n"
        "hashlib.sha256(open('/opt/airlock/airlock_wire.py', 'rb').read()).hexdigest()\n",
        language_mode="full",
    )
    assert result.ok, result.error
    host = hashlib.sha256((ROOT / "bridge" / "airlock_wire.py").read_bytes()).hexdigest()
    assert result.value == host, "the image is older than the contract: rebuild it"
