"""The guest runner as a process on the host (no container): compile rules and results.

The container tests cover the boundary; these cover the runner's own logic quickly, from the
guest's modules laid out as in the image (:mod:`tests.sandbox.guest_image`).
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import PROTOCOL_VERSION, program_error
from airlock.bridge.airlock_wire import ERRORS, RUN_WAITING, WARM_WHEN_IDLE
from airlock.policies import SandboxProfile
from tests.bridge.error_examples import EXAMPLES
from tests.sandbox.guest_image import RUNNER, load_guest, load_runner

ALLOWED = SandboxProfile().allowed_imports
Answer = Callable[[dict[str, Any]], dict[str, Any]]
"""A fake host's answer to a call frame: the result frame's ``ok`` and ``value`` or ``error``."""


runner = load_runner()
language = load_guest("airlock_language")
warm_up = load_guest("airlock_warm_up")


def run_in_process(
    program: str,
    mode: str = "restricted",
    output_limit: int = 4096,
    *,
    allowed_imports: Collection[str] = ALLOWED,
    tools: Collection[str] = (),
    answer: Answer | None = None,
    hello: list[dict[str, Any]] | None = None,
    refused: list[str] | None = None,
    run_waiting: bool = False,
    flags: tuple[str, ...] = (),
    run_after_s: float = 0.0,
) -> dict[str, Any]:
    """Run the real runner as a child process connected over a Unix socket.

    The test plays the host: the run offers ``tools`` (each with one ``arg`` parameter),
    ``answer`` answers their calls, the runner's hello frame is appended to ``hello`` and the
    tool names it reports refused to ``refused``. ``run_waiting``: the runner is started as
    for a run that waits for its container; ``flags`` are more of the runner's arguments. The
    run frame is sent ``run_after_s`` after the runner's hello.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bridge.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(1)
        command = [sys.executable, "-I", str(RUNNER), path]
        child = subprocess.Popen(command + [RUN_WAITING] * run_waiting + [*flags], env={})
        conn: socket.socket | None = None
        try:
            listener.settimeout(30)
            conn, _ = listener.accept()
            stream = conn.makefile("rwb")

            def recv() -> dict[str, Any]:
                (size,) = struct.unpack(">I", stream.read(4))
                return json.loads(stream.read(size))

            def send(message: dict[str, Any]) -> None:
                body = json.dumps(message).encode()
                stream.write(struct.pack(">I", len(body)) + body)
                stream.flush()

            greeting = recv()
            assert greeting["type"] == "hello"
            if hello is not None:
                hello.append(greeting)
            time.sleep(run_after_s)
            stubs = [{"name": name, "doc": "", "params": [{"name": "arg"}]} for name in tools]
            send(
                {"type": "run", "program": program, "mode": mode,
                 "allowed_imports": sorted(allowed_imports), "output_limit": output_limit,
                 "tools": stubs}
            )  # fmt: skip
            done = recv()
            while done["type"] == "refused" or (done["type"] == "call" and answer is not None):
                if done["type"] == "refused":
                    (refused if refused is not None else []).append(done["tool"])
                elif answer is not None:
                    send({"type": "result", "id": done["id"], **answer(done)})
                done = recv()
            assert done["type"] == "done"
            stream.close()
            return done["result"]  # type: ignore[no-any-return]
        finally:
            # Hang up as the host does: a runner whose program failed waits for it (up to
            # 2 s) so that the host can read the cgroup's counters first.
            if conn is not None:
                conn.close()
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
    namespace: dict[str, Any] = language.restricted_globals(
        ALLOWED, runner._FinalValue().set, runner.Tools(None, [])
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
    reported: list[str] = []
    caught = run_in_process(
        "for _ in range(3):\n"
        "    try:\n        tools.billing_refund_create(invoice_id='in_1')\n"
        "    except tools.UnknownTool as exc:\n        result([exc.code, exc.message])\n",
        mode=mode,
        refused=reported,
    )
    assert reported == ["billing_refund_create"]  # reported to the host once, however often
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


def test_hello_carries_the_hosts_protocol_version() -> None:
    hello: list[dict[str, Any]] = []
    run_in_process("1\n", hello=hello)
    assert hello[0]["version"] == PROTOCOL_VERSION


# (the warm-up program: the runner's, a kept program's process's own; what it prints)
WARM_UPS = [
    ("runner", warm_up.PROGRAM, "50\n"),
    ("kept_program", load_guest("airlock_kept_program")._WARM_UP, ""),
]


@pytest.mark.parametrize("mode", ["restricted", "full"])
@pytest.mark.parametrize(("case", "program", "printed"), WARM_UPS, ids=[r[0] for r in WARM_UPS])
def test_the_warm_up_program_runs_with_the_warm_up_imports(
    case: str, program: str, printed: str, mode: str
) -> None:
    # A warm-up refused in restricted mode would warm nothing, silently.
    imports = load_guest("airlock_wire").WARM_UP_IMPORTS
    result = run_in_process(program, mode=mode, allowed_imports=imports)
    assert result["status"] == "ok", (case, result["error"])
    assert result["stdout"] == printed


# Modules a trivial program does not need, and that a runner does not load before its first
# program when that program is waiting for it: what a runner loads first is CPU spent on every
# container started for one run (and ssl, which asyncio would load, on none).
NOT_LOADED_FOR_ONE_PROGRAM = (
    "asyncio", "concurrent.futures", "ctypes.util", "inspect", "shutil", "socket", "ssl",
    "subprocess", "tempfile",
)  # fmt: skip
LOADED = "import sys\n[m for m in {names!r} if m in sys.modules]\n"


def test_a_runner_started_for_a_waiting_run_loads_only_what_it_needs() -> None:
    result = run_in_process(
        LOADED.format(names=NOT_LOADED_FOR_ONE_PROGRAM), "full", run_waiting=True
    )
    assert result["status"] == "ok", result["error"]
    assert result["value"] == []


def test_a_runner_for_the_pool_warms_up_with_asyncio_and_without_ssl() -> None:
    result = run_in_process(LOADED.format(names=("asyncio", "ssl")), "full")
    assert result["value"] == ["asyncio"]


def test_a_runner_the_pool_started_while_emptied_warms_up_only_once_idle() -> None:
    # Taken half a second after its hello (in a burst, most are taken sooner), it has not
    # begun to warm up (a warm-up begun 0.1 s after it made tight gVisor deadlines wait for
    # asyncio's import) and loads only what its program needs...
    soon = run_in_process(
        LOADED.format(names=NOT_LOADED_FOR_ONE_PROGRAM),
        "full",
        flags=(WARM_WHEN_IDLE,),
        run_after_s=0.5,
    )
    assert (soon["status"], soon["value"]) == ("ok", []), soon["error"]
    # ...and once the burst is over, it warms up as a pooled runner does before its hello.
    later = run_in_process(
        LOADED.format(names=("asyncio", "ssl")),
        "full",
        flags=(WARM_WHEN_IDLE,),
        run_after_s=warm_up.IDLE_MS / 1000 + 1.5,
    )
    assert later["value"] == ["asyncio"]


@pytest.mark.parametrize(("run_comes", "warmed", "executed"), [
    (False, True, ["restricted", "full"]),
    (True, False, ["restricted"]),  # the run came while the first program warmed up
])  # fmt: skip
def test_a_warm_up_when_idle_stops_at_the_step_after_its_run_came(
    run_comes: bool, warmed: bool, executed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warm_up, "IDLE_MS", 0)
    modes: list[str] = []
    host, guest = socket.socketpair()
    with host, guest:

        def execute(request: dict[str, Any], finish: Callable[..., object]) -> dict[str, Any]:
            modes.append(request["mode"])
            if run_comes:
                host.send(b"r")
            return {}

        assert warm_up.warm_up_when_idle(guest, execute, ["json"]) is warmed
    assert modes == executed


AWAITING_PROGRAMS = {
    "top_level_await": "import sys\nawait tools.t(1) if False else None\nawait_done = 1\n",
    "aio_call": "import sys\nawait tools.t.aio(arg=1)\n",
}


@pytest.mark.parametrize("program", sorted(AWAITING_PROGRAMS))
def test_an_awaiting_program_gets_asyncio_without_ssl(program: str) -> None:
    source = AWAITING_PROGRAMS[program] + "[m for m in ('asyncio', 'ssl') if m in sys.modules]\n"
    result = run_in_process(
        source, "full", tools=["t"], answer=lambda call: {"ok": True, "value": 1},
        run_waiting=True,
    )  # fmt: skip
    assert result["status"] == "ok", result["error"]
    assert result["value"] == ["asyncio"]


def test_a_tool_function_builds_its_signature_when_asked() -> None:
    program = (
        "import inspect\n"
        "[str(inspect.signature(tools.t)), tools.t(2), repr(tools.t), hasattr(tools.t, 'x')]\n"
    )
    result = run_in_process(
        program, "full", tools=["t"], answer=lambda call: {"ok": True, "value": call["args"]}
    )
    assert result["value"] == [
        "(arg: 'object') -> 'dict'",
        {"arg": 2},
        "<tool t(arg: 'object') -> 'dict'>",
        False,
    ]


def test_the_seccomp_layer_finds_libseccomp_without_running_ldconfig() -> None:
    # pyseccomp's own lookup imports subprocess, shutil and tempfile and runs ldconfig twice;
    # whoever imports ctypes.util afterwards gets the real module.
    check = (
        f"import sys; sys.path.insert(0, {str(RUNNER.parent)!r})\n"
        "import airlock_seccomp as layer\n"
        "assert layer._IMPORT_ERROR is None, layer._IMPORT_ERROR\n"
        "print([m for m in ('subprocess', 'ctypes.util', 'tempfile') if m in sys.modules])\n"
        "import ctypes.util\n"
        "print(ctypes.util.find_library('c'), layer.pyseccomp._libseccomp_path)\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", check], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == ["[]", "libc.so.6 libseccomp.so.2"]


def _answer_with(errors: list[dict[str, Any]]) -> Answer:
    return lambda call: {"ok": False, "error": errors[call["args"]["arg"]]}


# Every error a host can send, caught by a full-mode program: its class, common attributes and
# typed fields.
EVERY_ERROR_PROGRAM = """
out = []
for n, fields in enumerate(FIELDS):
    try:
        tools.records_any_get(n)
    except tools.ToolError as exc:
        out.append([type(exc).__name__, exc.code, exc.message, exc.retryable,
                    {name: getattr(exc, name) for name in fields}])
out
"""


def test_a_program_reads_the_typed_fields_of_every_error() -> None:
    sent = [program_error(error) for error, _ in EXAMPLES]
    fields = [list(typed) for _, typed in EXAMPLES]
    program = f"FIELDS = {fields!r}\n" + EVERY_ERROR_PROGRAM
    result = run_in_process(
        program, mode="full", tools=["records_any_get"], answer=_answer_with(sent)
    )
    assert result["status"] == "ok", result["error"]
    expected = [
        [ERRORS[e["code"]].name, e["code"], e["message"], e["retryable"], typed]
        for e, (_, typed) in zip(sent, EXAMPLES, strict=True)
    ]
    assert result["value"] == expected


# The two a restricted program needs most: what to fix, and how long to wait.
RESTRICTED_READS = [
    # (name, error the host sends, program, value)
    ("issues",
     {"code": "invalid_input", "message": "m", "retryable": False,
      "issues": [{"field": "record_id", "reason": "is required"}]},
     "try:\n    tools.records_any_get(0)\nexcept tools.InvalidInput as exc:\n"
     "    result([exc.issues[0]['field'], exc.issues[0]['reason'], len(exc.issues)])\n",
     ["record_id", "is required", 1]),
    ("retry_after",
     {"code": "rate_limited", "message": "m", "retryable": True, "retry_after": 2.5},
     "try:\n    tools.records_any_get(0)\nexcept tools.RateLimited as exc:\n"
     "    result([exc.retry_after, exc.retryable])\n",
     [2.5, True]),
    ("missing_field",
     {"code": "rate_limited", "message": "m", "retryable": True},
     "try:\n    tools.records_any_get(0)\nexcept tools.RateLimited as exc:\n"
     "    result(exc.retry_after)\n",
     None),
    ("malformed_issues",
     {"code": "invalid_input", "message": "m", "retryable": False, "issues": "not a list"},
     "try:\n    tools.records_any_get(0)\nexcept tools.InvalidInput as exc:\n"
     "    result(exc.issues)\n",
     []),
    ("unknown_code",
     {"code": "new_code", "message": "m", "retryable": False, "extra": 1},
     "try:\n    tools.records_any_get(0)\nexcept tools.ToolError as exc:\n"
     "    result([exc.code, getattr(exc, 'extra', 'absent')])\n",
     ["new_code", "absent"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "error", "program", "value"), RESTRICTED_READS, ids=[r[0] for r in RESTRICTED_READS]
)
def test_a_restricted_program_reads_error_fields(
    name: str, error: dict[str, Any], program: str, value: Any
) -> None:
    result = run_in_process(program, tools=["records_any_get"], answer=_answer_with([error]))
    assert result["status"] == "ok", result["error"]
    assert result["value"] == value


def test_a_bad_call_on_the_guest_lists_its_issue() -> None:
    program = (
        "try:\n    tools.records_any_get(1, 2)\nexcept tools.InvalidInput as exc:\n"
        "    result(exc.issues)\n"
    )
    result = run_in_process(program, tools=["records_any_get"])
    assert result["value"] == [{"field": "", "reason": "too many positional arguments"}]
