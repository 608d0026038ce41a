"""A program that attacks the bridge socket itself: the host ends only that run."""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import Sandbox

pytestmark = pytest.mark.docker

FIND_SOCKET = """
import os, socket, stat, struct, json
def bridge():
    for fd in range(3, 64):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                return socket.socket(fileno=fd)
        except OSError:
            pass
    raise SystemExit("no bridge socket")
sock = bridge()
"""

ATTACKS = {
    "oversized_header": "sock.sendall(struct.pack('>I', 1 << 30))\nimport time; time.sleep(3)\n",
    "garbage_body": "sock.sendall(struct.pack('>I', 8) + b'\\xff' * 8)\nimport time; time.sleep(3)\n",
    "unknown_frame_type": (
        "body = json.dumps({'type': 'shell', 'cmd': 'id'}).encode()\n"
        "sock.sendall(struct.pack('>I', len(body)) + body)\nimport time; time.sleep(3)\n"
    ),
    "malformed_result": (
        "body = json.dumps({'type': 'done', 'result': {'status': 'root'}}).encode()\n"
        "sock.sendall(struct.pack('>I', len(body)) + body)\nimport time; time.sleep(3)\n"
    ),
    "half_frame_then_close": "sock.sendall(struct.pack('>I', 100) + b'{')\nsock.close()\nos._exit(0)\n",
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_protocol_attack_ends_only_that_run(sandbox: Sandbox, attack: str) -> None:
    program = textwrap.dedent(FIND_SOCKET) + ATTACKS[attack]
    result = sandbox.run(program, language_mode="full", timeout_s=10)
    assert result.status in {"protocol_error", "error"}, result
    if attack != "half_frame_then_close":
        assert result.status == "protocol_error"
        assert result.duration_s < 3, "the host must not wait for the deadline"
    # The host and the next run are unaffected.
    after = sandbox.run("1 + 1\n")
    assert after.ok
    assert after.value == 2


def test_forged_done_frame_is_capped_by_the_host(sandbox: Sandbox) -> None:
    # A program can only forge its own result; the host still enforces the output cap.
    cap = sandbox.backend.profile.output_limit_bytes
    forged = (
        "body = json.dumps({'type': 'done', 'result': {'status': 'ok', 'exit_status': 0,"
        f" 'has_value': False, 'stdout': 'x' * {cap * 3}}}}}).encode()\n"
        "sock.sendall(struct.pack('>I', len(body)) + body)\nimport time; time.sleep(3)\n"
    )
    result = sandbox.run(textwrap.dedent(FIND_SOCKET) + forged, language_mode="full")
    assert len(result.stdout) <= cap
    assert result.truncated
