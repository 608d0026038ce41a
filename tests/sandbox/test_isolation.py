"""Adversarial programs against the real container boundary, judged from the host.

Each program tries to cross one boundary and reports what it saw; the host asserts nothing
crossed. Programs run in ``full`` mode: the container is the boundary, not RestrictedPython.
"""

from __future__ import annotations

import platform
import textwrap

import pytest

from tests.conftest import Sandbox
from tests.sandbox.syscalls import (
    ARCH_COLUMN,
    SYSCALL_ARGS,
    SYSCALL_NUMBERS,
    callable_here,
    expected_errno,
)

pytestmark = pytest.mark.docker


def run_full(sandbox: Sandbox, program: str, **profile: object) -> dict[str, object]:
    result = sandbox.run(textwrap.dedent(program), language_mode="full", **profile)
    assert result.status == "ok", (result.status, result.error, result.stderr)
    assert isinstance(result.value, dict)
    return result.value


NETWORK_PROBES = {
    "tcp_public": """
        import socket
        s = socket.socket(); s.settimeout(2)
        s.connect(("1.1.1.1", 53))
    """,
    "dns_lookup": """
        import socket
        socket.getaddrinfo("example.com", 80)
    """,
    "udp_send": """
        import socket
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"x", ("8.8.8.8", 53))
    """,
    "packet_socket": """
        import socket
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    """,
    "raw_socket": """
        import socket
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    """,
    "ipv6_tcp": """
        import socket
        s = socket.socket(socket.AF_INET6); s.settimeout(2)
        s.connect(("2606:4700:4700::1111", 53))
    """,
}


@pytest.mark.parametrize("probe", sorted(NETWORK_PROBES))
def test_network_is_unreachable(sandbox: Sandbox, probe: str) -> None:
    program = "def attempt():\n" + textwrap.indent(textwrap.dedent(NETWORK_PROBES[probe]), "    ")
    program += textwrap.dedent("""
        try:
            attempt()
            outcome = "crossed"
        except OSError as exc:
            outcome = type(exc).__name__ + ":" + str(exc.errno)
        {"outcome": outcome}
    """)
    value = run_full(sandbox, program)
    assert value["outcome"] != "crossed"


def test_only_loopback_interface_exists(sandbox: Sandbox) -> None:
    value = run_full(
        sandbox,
        """
        import socket
        {"interfaces": [name for _, name in socket.if_nameindex()]}
    """,
    )
    assert value["interfaces"] == ["lo"]


def test_process_is_unprivileged_and_filtered(sandbox: Sandbox) -> None:
    value = run_full(
        sandbox,
        """
        import os
        status = dict(
            line.split(":", 1) for line in open("/proc/self/status").read().splitlines()
        )
        {key: status[key].strip() for key in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")} | {
            "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid()}
    """,
    )
    assert int(str(value["CapEff"]), 16) == 0
    assert int(str(value["CapPrm"]), 16) == 0
    assert int(str(value["CapBnd"]), 16) == 0
    assert value["NoNewPrivs"] == "1"
    assert value["Seccomp"] == "2"
    assert value["uid"] != 0
    assert value["euid"] != 0
    assert value["gid"] != 0


def test_environment_is_empty_of_host_values(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_TEST_SECRET", "s3cr3t-host-value")
    value = run_full(
        sandbox,
        """
        import os
        {"environ": dict(os.environ)}
    """,
    )
    assert value["environ"] == {}
    assert "s3cr3t-host-value" not in str(value)


def test_file_system_is_read_only_and_tmp_noexec(sandbox: Sandbox) -> None:
    value = run_full(
        sandbox,
        """
        import os, errno
        outcomes = {}
        for path in ("/etc/airlock-probe", "/opt/airlock/x", "/run/airlock/x", "/probe"):
            try:
                open(path, "w").write("x")
                outcomes[path] = "written"
            except OSError as exc:
                outcomes[path] = errno.errorcode[exc.errno]
        try:
            os.unlink("/run/airlock/bridge.sock")
            outcomes["unlink_socket"] = "removed"
        except OSError as exc:
            outcomes["unlink_socket"] = errno.errorcode[exc.errno]
        script = "/tmp/probe.sh"
        open(script, "w").write("#!/bin/sh\\necho crossed\\n")
        os.chmod(script, 0o755)
        try:
            os.execv(script, [script])
        except OSError as exc:
            outcomes["exec_tmp"] = errno.errorcode[exc.errno]
        outcomes["host_paths"] = [p for p in ("/work", "/root/.ssh", "/var/run/docker.sock") if os.path.exists(p)]
        outcomes
    """,
    )
    for path in ("/etc/airlock-probe", "/opt/airlock/x", "/run/airlock/x", "/probe"):
        assert value[path] in {"EROFS", "EACCES"}, path
    assert value["unlink_socket"] in {"EROFS", "EACCES"}
    assert value["exec_tmp"] == "EACCES"
    assert value["host_paths"] == []


@pytest.fixture(scope="module")
def denied_outcomes(sandbox: Sandbox) -> dict[str, object]:
    """Every denied call of this architecture, tried once from inside one container."""
    column = ARCH_COLUMN[platform.machine()]
    calls = {
        name: (SYSCALL_NUMBERS[name][column], SYSCALL_ARGS.get(name, [0] * 6))
        for name in callable_here()
    }
    return run_full(
        sandbox,
        f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        params = ctypes.create_string_buffer(120)
        special = {{"@pid": os.getpid(), "@params": ctypes.addressof(params)}}
        outcomes = {{}}
        for name, (number, args) in {calls!r}.items():
            ctypes.set_errno(0)
            values = [ctypes.c_long(special.get(a, 0) if isinstance(a, str) else a) for a in args]
            rc = libc.syscall(number, *values)
            outcomes[name] = [rc, ctypes.get_errno()]
        outcomes
    """,
    )


@pytest.mark.parametrize("call", callable_here())
def test_forbidden_system_calls_fail(denied_outcomes: dict[str, object], call: str) -> None:
    # EPERM (ENOSYS for clone3): seccomp answers before the kernel looks.
    assert denied_outcomes[call] == [-1, expected_errno(call)]


def test_clone_with_new_namespace_is_refused(sandbox: Sandbox) -> None:
    value = run_full(
        sandbox,
        """
        import ctypes, platform
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWUSER = 0x10000000
        SIGCHLD = 17
        number = {"x86_64": 56, "aarch64": 220}[platform.machine()]
        rc = libc.syscall(number, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
        if rc == 0:
            import os
            os._exit(0)
        {"rc": rc, "errno": ctypes.get_errno()}
    """,
    )
    assert value == {"rc": -1, "errno": 1}


def test_host_process_is_not_visible(sandbox: Sandbox) -> None:
    value = run_full(
        sandbox,
        """
        import os
        {"pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
    """,
    )
    assert value["pids"] == [1], "only the runner runs in the container's pid namespace"


def test_probe_finds_the_whole_profile_in_force(sandbox: Sandbox) -> None:
    from airlock.sandbox import PROBE_PROGRAM, judge_probe

    result = sandbox.run(PROBE_PROGRAM, language_mode="full")
    findings = judge_probe(result, sandbox.backend.profile)
    assert len(findings) == 10
    assert [f.check for f in findings if not f.ok] == []
