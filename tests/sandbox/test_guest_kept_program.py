"""A kept program's process as it gets ready: its rehearsal of what it does around its program
(``airlock_kept_program._rehearse``) is run on the host, in this process, as the image runs it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.sandbox.guest_image import load_guest

# (case, the result the rehearsal makes a done frame of)
RESULTS = [
    ("ok", {"status": "ok", "exit_status": 0, "has_value": True, "value": 1, "stdout": ""}),
    ("error", {"status": "error", "exit_status": 1, "error": {"type": "ValueError"}}),
    ("empty", {}),
]


class _Connection:
    """Where the rehearsal's tool functions would send their calls: they must send none."""

    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, message: object) -> None:
        self.sent.append(message)


@pytest.mark.parametrize(("case", "result"), RESULTS, ids=[row[0] for row in RESULTS])
def test_a_kept_programs_rehearsal_leaves_no_descriptor_open_and_sends_nothing(
    case: str, result: dict[str, Any]
) -> None:
    # The process's descriptors are what the zygote checks and what its program inherits:
    # the rehearsal's pipe, on which it reports a deadline to no one, must be gone. The
    # tools' functions it makes hold the program's connection: nothing may reach the host.
    kept_program = load_guest("airlock_kept_program")
    connection = _Connection()
    before = sorted(os.listdir("/proc/self/fd"))
    kept_program._rehearse(connection, result)
    assert sorted(os.listdir("/proc/self/fd")) == before, case
    assert connection.sent == [], case
