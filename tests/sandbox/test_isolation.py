"""Adversarial programs against the real container boundary, judged from the host.

Each program tries to cross one boundary and reports what it saw; the host asserts nothing
crossed. Programs run in ``full`` mode: the container is the boundary, not RestrictedPython.
The whole suite runs under each container runtime (``runc`` and gVisor's ``runsc``), in the
base image and in the data image (numpy, pandas, pyarrow and matplotlib imported before
the program, the second seccomp layer loaded after them).
"""

from __future__ import annotations

import os
import platform
import socket
import textwrap
from collections.abc import Iterator

import docker
import pytest

from airlock.policies import SECCOMP_ARGUMENT_RULES, ContainerRuntime
from tests.conftest import Sandbox
from tests.sandbox.runtimes import IMAGES, RUNTIMES, runtime_sandbox
from tests.sandbox.syscalls import (
    ARCH_COLUMN,
    SYSCALL_ARGS,
    SYSCALL_NUMBERS,
    callable_here,
    expected_errno,
)

pytestmark = pytest.mark.docker


# The data image under gVisor starts each container in about 4 s here (importing pandas
# through gVisor's kernel), three times what the rest of the suite takes: it runs with the
# slow tests (`make soak`), and the data image under runc and crun stands for it in `make test`.
SLOW: frozenset[tuple[str, str]] = frozenset({("runsc", "data")})


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(
            (runtime, image),
            id=f"{runtime}-{image}",
            marks=[pytest.mark.slow] if (runtime, image) in SLOW else [],
        )
        for image in IMAGES
        for runtime in RUNTIMES
    ],
)
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A warm backend per runtime and image: every test of this module runs under each."""
    runtime: ContainerRuntime = request.param[0]
    with runtime_sandbox(runtime, request.param[1]) as box:
        yield box


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
    # Read from sysfs: if_nameindex() needs a netlink socket, which the filter refuses.
    value = run_full(
        sandbox,
        """
        import os
        {"interfaces": sorted(os.listdir("/sys/class/net"))}
    """,
    )
    assert value["interfaces"] == ["lo"]


def test_each_container_has_a_network_namespace_of_its_own(sandbox: Sandbox) -> None:
    # Judged from the host. The engine builds no network for a sandbox container (it is
    # created with networking disabled): the runtime makes its namespace, which must be
    # neither the host's nor another sandbox's.
    sandbox.wait_pool()
    client = docker.from_env()
    pids = [
        int(client.api.inspect_container(container.id)["State"]["Pid"])
        for container in sandbox.backend.pool._ready
    ]
    namespaces = [os.readlink(f"/proc/{pid}/ns/net") for pid in pids]
    assert len(pids) == 2, "the pool holds two idle containers"
    assert len(set(namespaces)) == len(pids), namespaces
    assert os.readlink("/proc/self/ns/net") not in namespaces


# Every address family this Python knows, except those the outer layer allows.
ALLOWED_FAMILIES = set(SECCOMP_ARGUMENT_RULES["socket"].values)
REFUSED_FAMILIES = sorted(
    {name: int(value) for name, value in vars(socket).items() if name.startswith("AF_")}.items()
)
REFUSED_FAMILIES = [(n, v) for n, v in REFUSED_FAMILIES if v not in ALLOWED_FAMILIES]


@pytest.fixture(scope="module")
def socket_outcomes(sandbox: Sandbox) -> dict[str, object]:
    """``socket()`` and ``socketpair()`` of every family, tried from inside one run."""
    return run_full(
        sandbox,
        f"""
        import ctypes, errno, socket
        libc = ctypes.CDLL(None, use_errno=True)
        fds = (ctypes.c_int * 2)()
        outcomes = {{}}
        for name, family in {[*REFUSED_FAMILIES, ("AF_UNIX", 1)]!r}:
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW):
                ctypes.set_errno(0)
                rc = libc.socket(family, kind, 0)
                outcomes[f"socket {{name}} {{kind}}"] = [rc, ctypes.get_errno()]
                ctypes.set_errno(0)
                rc = libc.socketpair(family, kind, 0, fds)
                outcomes[f"socketpair {{name}} {{kind}}"] = [rc, ctypes.get_errno()]
        outcomes
    """,
    )


@pytest.mark.parametrize(
    ("family", "number"), REFUSED_FAMILIES, ids=[n for n, _ in REFUSED_FAMILIES]
)
def test_no_socket_of_another_family_than_unix(
    socket_outcomes: dict[str, object], family: str, number: int
) -> None:
    # AF_VSOCK passed messages between sandboxes on a VM host; AF_NETLINK, AF_PACKET and
    # AF_INET reach the kernel's network code. EPERM: the filter answered, not the kernel.
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW):
        assert socket_outcomes[f"socket {family} {kind}"] == [-1, 1]
        assert socket_outcomes[f"socketpair {family} {kind}"] == [-1, 1]


def test_unix_pairs_remain_and_new_unix_sockets_do_not(socket_outcomes: dict[str, object]) -> None:
    # The second layer refuses socket() of any family (the bridge is connected already);
    # asyncio needs AF_UNIX pairs.
    stream = socket.SOCK_STREAM
    assert socket_outcomes[f"socket AF_UNIX {stream}"] == [-1, 1]
    assert socket_outcomes[f"socketpair AF_UNIX {stream}"] == [0, 0]


def test_personality_cannot_change_the_execution_domain(sandbox: Sandbox) -> None:
    value = run_full(
        sandbox,
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        outcomes = {}
        for persona in (0x0, 0x0008, 0x20000, 0x0040000, 0xFFFFFFFF):  # READ_IMPLIES_EXEC
            ctypes.set_errno(0)
            outcomes[hex(persona)] = [libc.personality(ctypes.c_ulong(persona)), ctypes.get_errno()]
        outcomes
    """,
    )
    assert value == {h: [-1, 1] for h in ("0x0", "0x8", "0x20000", "0x40000", "0xffffffff")}


def test_a_memfd_cannot_hold_a_program(sandbox: Sandbox) -> None:
    # A memfd ran the program's own ELF despite noexec on /tmp.
    value = run_full(
        sandbox,
        """
        import os
        try:
            fd = os.memfd_create("payload")
            outcome = "created"
        except OSError as exc:
            outcome = exc.errno
        {"memfd": outcome}
    """,
    )
    assert value == {"memfd": 1}


def test_process_is_unprivileged_and_filtered(sandbox: Sandbox) -> None:
    value = run_full(
        sandbox,
        """
        import os
        status = dict(
            line.split(":", 1) for line in open("/proc/self/status").read().splitlines()
        )
        {key: status.get(key, "").strip() for key in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")} | {
            "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid()}
    """,
    )
    assert int(str(value["CapEff"]), 16) == 0
    assert int(str(value["CapPrm"]), 16) == 0
    assert int(str(value["CapBnd"]), 16) == 0
    # gVisor's /proc does not report NoNewPrivs; the engine still sets it on the sandbox.
    gvisor = _runtime(sandbox) == "runsc"
    assert value["NoNewPrivs"] == ("" if gvisor else "1")
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


WRITABLE = {"/tmp", "/out"}
"""The only directories a program may leave a file in (``/dev/mqueue``, a queue namespace of
the container's own that the kept runner empties, aside)."""


def test_a_program_can_write_only_under_tmp_and_out(sandbox: Sandbox) -> None:
    value = run_full(
        sandbox,
        """
        import os
        pruned = ("/proc", "/sys/kernel", "/sys/devices", "/sys/bus", "/sys/class",
                  "/sys/module", "/usr", "/opt", "/lib")
        writable = []
        for root, dirs, _ in os.walk("/"):
            if root.startswith(pruned):
                dirs[:] = []
            probe = os.path.join(root, ".airlock-probe")
            try:
                os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
            except OSError:
                continue
            os.unlink(probe)
            writable.append(root)
        {"writable": writable}
    """,
    )
    tops = {"/" + path.split("/")[1] for path in value["writable"] if path != "/dev/mqueue"}
    assert tops == WRITABLE, value


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
        import mmap
        with open(script, "rb") as f:
            try:
                mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC)
                outcomes["map_exec_tmp"] = "mapped"
            except OSError as exc:
                outcomes["map_exec_tmp"] = errno.errorcode[exc.errno]
        outcomes["host_paths"] = [p for p in ("/work", "/root/.ssh", "/var/run/docker.sock") if os.path.exists(p)]
        outcomes
    """,
    )
    for path in ("/etc/airlock-probe", "/opt/airlock/x", "/run/airlock/x", "/probe"):
        assert value[path] in {"EROFS", "EACCES"}, path
    assert value["unlink_socket"] in {"EROFS", "EACCES"}
    assert value["exec_tmp"] == "EPERM"  # the second layer: no execve at all
    # noexec on /tmp; gVisor's kernel maps such a file executable (listed in SECURITY.md):
    # with execve and memfd_create refused, no binary runs from there either way.
    assert value["map_exec_tmp"] == ("mapped" if _runtime(sandbox) == "runsc" else "EPERM")
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


def test_the_host_boot_is_not_visible(sandbox: Sandbox) -> None:
    # Which machine and which boot: every sandbox on the host would share them.
    value = run_full(
        sandbox,
        """
        def read(path):
            try:
                return open(path).read()
            except OSError:
                return None
        {"cmdline": read("/proc/cmdline"), "boot_id": read("/proc/sys/kernel/random/boot_id")}
    """,
    )
    with open("/proc/cmdline") as host_cmdline, open("/proc/sys/kernel/random/boot_id") as boot:
        host = {"cmdline": host_cmdline.read(), "boot_id": boot.read()}
    assert value["cmdline"] != host["cmdline"]
    assert value["boot_id"] != host["boot_id"]
    assert value["boot_id"] in ("", None)  # masked (runc) or absent (gVisor)


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
    assert len(findings) == 13
    assert [f.check for f in findings if not f.ok] == []
    assert sandbox.backend.profile.runtime in findings[0].seen


def _runtime(sandbox: Sandbox) -> ContainerRuntime:
    return sandbox.backend.profile.runtime
