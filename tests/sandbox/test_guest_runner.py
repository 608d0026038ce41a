"""The guest runner as a process on the host (no container): compile rules and results.

The container tests cover the boundary; these cover the runner's own logic quickly.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from airlock.policies import SandboxProfile

RUNNER = Path(__file__).resolve().parents[2] / "sandbox" / "guest" / "airlock_runner.py"
ALLOWED = SandboxProfile().allowed_imports


def _load_runner() -> ModuleType:
    # As in the image: the guest modules import each other as top-level modules.
    if str(RUNNER.parent) not in sys.path:
        sys.path.append(str(RUNNER.parent))
    spec = importlib.util.spec_from_file_location("airlock_runner", RUNNER)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


runner = _load_runner()


def run_in_process(
    program: str, mode: str = "restricted", output_limit: int = 4096
) -> dict[str, Any]:
    """Run the real runner as a child process connected over a Unix socket."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bridge.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(1)
        child = subprocess.Popen([sys.executable, "-I", str(RUNNER), path], env={})
        try:
            listener.settimeout(30)
            conn, _ = listener.accept()
            stream = conn.makefile("rwb")

            def recv() -> dict[str, Any]:
                (size,) = struct.unpack(">I", stream.read(4))
                return json.loads(stream.read(size))

            assert recv()["type"] == "hello"
            body = json.dumps(
                {"type": "run", "program": program, "mode": mode,
                 "allowed_imports": sorted(ALLOWED), "output_limit": output_limit}
            ).encode()  # fmt: skip
            stream.write(struct.pack(">I", len(body)) + body)
            stream.flush()
            done = recv()
            assert done["type"] == "done"
            return done["result"]  # type: ignore[no-any-return]
        finally:
            child.wait(timeout=30)
            listener.close()


REFUSED = [
    ("import_os", "import os", "'os' is not allowed"),
    ("import_submodule", "import os.path", "'os.path' is not allowed"),
    ("from_import", "from subprocess import run", "'subprocess' is not allowed"),
    ("relative_import", "from . import x", "relative imports"),
    ("nested_import", "def f():\n    import socket\n", "'socket' is not allowed"),
    ("dunder_attribute", "().__class__", '"__class__" is an invalid attribute'),
    ("dunder_name", "__import__('os')", '"__import__" is an invalid variable name'),
    ("underscore_name", "_secret = 1", '"_secret" is an invalid variable name'),
    ("exec", "exec('x=1')", "Exec calls are not allowed"),
    ("eval", "eval('1')", "Eval calls are not allowed"),
    ("syntax", "def (:", "syntax error"),
]


@pytest.mark.parametrize(("name", "program", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_restricted_mode_refuses_before_running(name: str, program: str, message: str) -> None:
    with pytest.raises(
        runner.ProgramRejected, match=message.replace("(", r"\(").replace(".", r"\.")
    ):
        runner.compile_program(program, "restricted", ALLOWED)


def test_full_mode_allows_any_import() -> None:
    body, last = runner.compile_program("import os\nos.getpid()\n", "full", ALLOWED)
    assert body is not None
    assert last is not None


def test_last_expression_is_compiled_separately() -> None:
    body, last = runner.compile_program("x = 2\nx * 21\n", "restricted", ALLOWED)
    namespace: dict[str, Any] = runner._restricted_globals(
        ALLOWED, runner._FinalValue(), runner.Tools(None, [])
    )
    exec(body, namespace)
    assert eval(last, namespace) == 42


@pytest.mark.parametrize(
    ("program", "status", "value", "stdout"),
    [
        ("print('a', 1)\n{'k': [1, 2]}\n", "ok", {"k": [1, 2]}, "a 1\n"),
        ("result([1])\nNone\n", "ok", [1], ""),
        ("print('x')\n", "ok", None, "x\n"),
        ("raise ValueError('bad')\n", "error", None, ""),
        ("result(float('nan'))\n", "error", None, ""),
    ],
)
def test_runner_results(program: str, status: str, value: Any, stdout: str) -> None:
    result = run_in_process(program)
    assert result["status"] == status
    assert result["value"] == value
    assert result["stdout"] == stdout


@pytest.mark.parametrize("mode", ["restricted", "full"])
def test_a_tool_the_run_was_not_given_raises_unknown_tool(mode: str) -> None:
    caught = run_in_process(
        "try:\n    tools.billing_refund_create(invoice_id='in_1')\n"
        "except tools.UnknownTool as exc:\n    result([exc.code, exc.message])\n",
        mode=mode,
    )
    assert caught["status"] == "ok", caught["error"]
    assert caught["value"][0] == "unknown_tool"
    assert "'billing_refund_create'" in caught["value"][1]
    uncaught = run_in_process("tools.billing_refund_create(invoice_id='in_1')\n", mode=mode)
    assert uncaught["status"] == "error"
    assert uncaught["error"]["type"] == "UnknownTool"
    assert uncaught["error"]["code"] == "unknown_tool"
    assert "'billing_refund_create'" in uncaught["error"]["message"]


def test_output_cap_stops_the_program_with_truncated_output() -> None:
    result = run_in_process("while True:\n    print('y' * 100)\n", output_limit=1000)
    assert result["status"] == "limit_exceeded"
    assert result["limit"] == "output"
    assert result["truncated"] is True
    assert len(result["stdout"]) == 1000


def test_fd_level_writes_are_captured() -> None:
    result = run_in_process(
        "import os\nos.write(1, b'raw\\n')\nos.write(2, b'err\\n')\n", mode="full"
    )
    assert result["stdout"] == "raw\n"
    assert result["stderr"] == "err\n"


def test_except_exception_cannot_swallow_the_output_stop() -> None:
    program = (
        "while True:\n    try:\n        print('z' * 500)\n    except Exception:\n        pass\n"
    )
    result = run_in_process(program, output_limit=2000)
    assert result["limit"] == "output"


def test_forked_child_never_reports_for_the_runner() -> None:
    program = "import os\npid = os.fork()\nif pid == 0:\n    result('child')\nelse:\n    os.waitpid(pid, 0)\n    result('parent')\n"
    result = run_in_process(program, mode="full")
    assert result["value"] == "parent"


def test_environment_is_cleared() -> None:
    result = run_in_process("import os\ndict(os.environ)\n", mode="full")
    assert result["value"] == {}
