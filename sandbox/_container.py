"""One sandbox container: started hardened, its runner connected over the bridge socket.

A :class:`SandboxContainer` serves exactly one program and is then destroyed. The program is
delivered as a ``run`` frame over a Unix socket that lives in a per-container host directory
bind-mounted read-only at ``/run/airlock``; the result comes back as a ``done`` frame. Nothing
is copied in or out of the container's file system.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import struct
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import LogConfig, Ulimit
from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from airlock.bridge import (
    PROTOCOL_VERSION,
    FrameError,
    RunEnd,
    ToolSession,
    encode_frame,
    read_frame,
    serve_run,
)
from airlock.policies import SandboxProfile
from airlock.sandbox._cgroup import CgroupEvidence, read_evidence
from airlock.sandbox._errors import SandboxFailure, map_docker_errors
from airlock.sandbox._result import LimitName, ProgramError, RunResult, RunStatus

__all__ = ["GUEST_MOUNT", "SandboxContainer", "container_config"]

GUEST_MOUNT: Final = "/run/airlock"
_SOCKET_NAME: Final = "bridge.sock"
_STARTUP_TIMEOUT_S: Final = 30.0
_HELLO_MAX_BYTES: Final = 4096
# A done frame holds two capped streams (JSON escaping can grow text up to 6x), an error
# with a traceback and a final value.
_RESULT_OVERHEAD_BYTES: Final = 256 * 1024
_KILLED_EXIT_STATUS: Final = 137


def container_config(
    profile: SandboxProfile, *, image: str, socket_dir: Path, labels: dict[str, str]
) -> dict[str, Any]:
    """Keyword arguments for ``containers.run``: the hardened profile, nothing optional."""
    return {
        "image": image,
        "detach": True,
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": f"rw,noexec,nosuid,nodev,size={profile.tmpfs_bytes},mode=1777"},
        "user": profile.user,
        "cap_drop": ["ALL"],
        "security_opt": [
            "no-new-privileges:true",
            "seccomp=" + json.dumps(profile.docker_seccomp(), separators=(",", ":")),
        ],
        "pids_limit": profile.pids_limit,
        "mem_limit": profile.memory_bytes,
        "memswap_limit": profile.memory_bytes,
        "nano_cpus": int(profile.cpus * 1e9),
        "ulimits": [
            Ulimit(name="nofile", soft=profile.nofile_limit, hard=profile.nofile_limit),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "environment": {},
        "labels": labels,
        "volumes": {str(socket_dir): {"bind": GUEST_MOUNT, "mode": "ro"}},
        # The guest's stdout is captured by the runner; anything written to the container's
        # own streams is dropped, never stored on the host.
        "log_config": LogConfig(type=LogConfig.types.NONE),
        "ipc_mode": "none",
        "hostname": "sandbox",
        "working_dir": "/tmp",
    }


class _GuestResult(BaseModel):
    """The ``done`` frame's result as the guest reports it; validated, then re-checked."""

    model_config = ConfigDict(extra="ignore", strict=True)

    status: RunStatus
    exit_status: int
    has_value: bool
    value: JsonValue = None
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    limit: LimitName | None = None
    error: ProgramError | None = None
    duration_s: float | None = None
    cpu_time_s: float | None = None
    peak_memory_bytes: int | None = None
    started_at: float | None = None


def _peer_pid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return int(pid)


class SandboxContainer:
    """A started container whose runner is connected, warm and waiting for one program."""

    def __init__(
        self,
        *,
        container: Container,
        socket_dir: Path,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        profile: SandboxProfile,
    ) -> None:
        self.container = container
        self.profile = profile
        self._socket_dir = socket_dir
        self._reader = reader
        self._writer = writer
        self._used = False
        self._kept = False

    @property
    def id(self) -> str:
        """The container's full id."""
        return str(self.container.id)

    @property
    def alive(self) -> bool:
        """Whether the runner is still connected (a pooled container can die while idle)."""
        return not self._reader.at_eof() and not self._writer.is_closing()

    @classmethod
    async def start(
        cls,
        client: docker.DockerClient,
        *,
        image: str,
        profile: SandboxProfile,
        labels: dict[str, str],
        socket_root: Path,
    ) -> SandboxContainer:
        """Start a container and wait until its runner says hello.

        Raises:
            SandboxFailure: the container did not start or its runner did not connect.
            SandboxError: the engine or the image is missing.
        """
        socket_dir = Path(tempfile.mkdtemp(prefix="run-", dir=socket_root))
        container: Container | None = None
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # The runner is not root and not the host's user: it needs to traverse the
            # directory and connect to the socket. Who connects is checked below.
            socket_dir.chmod(0o755)
            path = socket_dir / _SOCKET_NAME
            listener.bind(str(path))
            path.chmod(0o666)
            listener.listen(1)
            listener.setblocking(False)
            config = container_config(profile, image=image, socket_dir=socket_dir, labels=labels)
            container = await asyncio.to_thread(_run_detached, client, config)
            connection = await cls._accept_runner(listener, container)
            reader, writer = await asyncio.open_unix_connection(sock=connection)
            hello = await asyncio.wait_for(
                read_frame(reader, max_bytes=_HELLO_MAX_BYTES), _STARTUP_TIMEOUT_S
            )
            if (
                not hello
                or hello.get("type") != "hello"
                or hello.get("version") != PROTOCOL_VERSION
            ):
                writer.close()
                raise SandboxFailure(f"the runner's hello was not understood: {hello!r}")
        except BaseException as exc:
            if container is not None:
                await _remove(container)
            shutil.rmtree(socket_dir, ignore_errors=True)
            if isinstance(exc, (TimeoutError, FrameError, OSError)):
                raise SandboxFailure(f"the sandbox runner did not start: {exc!r}") from exc
            raise
        finally:
            listener.close()
        return cls(
            container=container,
            socket_dir=socket_dir,
            reader=reader,
            writer=writer,
            profile=profile,
        )

    @staticmethod
    async def _accept_runner(listener: socket.socket, container: Container) -> socket.socket:
        loop = asyncio.get_running_loop()
        connection, _ = await asyncio.wait_for(loop.sock_accept(listener), _STARTUP_TIMEOUT_S)
        # The socket file is world-connectable on the host: only the container's own first
        # process (the runner) may be the peer.
        with map_docker_errors():
            await asyncio.to_thread(container.reload)
        runner_pid = int(container.attrs["State"]["Pid"])
        if _peer_pid(connection) != runner_pid:
            connection.close()
            raise SandboxFailure("a process other than the container's runner connected")
        return connection

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile,
        pooled: bool,
        tools: ToolSession | None = None,
        keep: bool = False,
    ) -> RunResult:
        """Deliver ``program``, serve its tool calls, and report how it ended.

        The caller destroys the container afterwards, whatever happened; unless ``keep``,
        which makes the runner wait for further programs of the same conversation (every
        run of a kept container must pass ``keep``).
        """
        if self._used and not (keep and self._kept):
            raise RuntimeError("a sandbox container runs one program only, unless kept")
        self._used = True
        self._kept = keep
        began = time.perf_counter()
        deadline = time.monotonic() + profile.timeout_s
        stubs = [stub.to_wire() for stub in tools.stubs()] if tools else []
        self._writer.write(
            encode_frame(
                {
                    "type": "run",
                    "program": program,
                    "mode": profile.language_mode,
                    "allowed_imports": sorted(profile.allowed_imports),
                    "output_limit": profile.output_limit_bytes,
                    "tools": stubs,
                    **({"keep": True} if keep else {}),
                }
            )
        )
        try:
            await self._writer.drain()
            outcome = await serve_run(
                self._reader,
                self._writer,
                session=tools,
                deadline=deadline,
                max_done_bytes=2 * 6 * profile.output_limit_bytes + _RESULT_OVERHEAD_BYTES,
            )
        except (ConnectionError, OSError):
            outcome = None
        result = await self._result_of(outcome, began, profile, pooled)
        return result.model_copy(update={"tool_calls": tools.calls if tools else 0})

    async def _result_of(
        self,
        outcome: dict[str, Any] | RunEnd | None,
        began: float,
        profile: SandboxProfile,
        pooled: bool,
    ) -> RunResult:
        if outcome is None:
            return await self._runner_died(began, pooled)
        if isinstance(outcome, RunEnd):
            if outcome.code == "protocol_error":
                return self._protocol_error(began, outcome.message, pooled)
            return self._stopped(began, outcome.limit or "timeout", pooled, outcome.message)
        try:
            guest = _GuestResult.model_validate(outcome.get("result"))
        except ValidationError as exc:
            return self._protocol_error(
                began, f"malformed result: {exc.error_count()} errors", pooled
            )
        return self._checked(guest, began, profile, pooled)

    def _checked(
        self, guest: _GuestResult, began: float, profile: SandboxProfile, pooled: bool
    ) -> RunResult:
        cap = profile.output_limit_bytes
        stdout, cut_out = _cap_text(guest.stdout, cap)
        stderr, cut_err = _cap_text(guest.stderr, cap)
        status, limit, exit_status = guest.status, guest.limit, guest.exit_status
        evidence = read_evidence(self.id)
        if status != "ok" and limit is None and evidence is not None:
            # A failure caused by a limit surfaces in the guest as an ordinary exception
            # (fork fails with EAGAIN); the kernel's counters say which limit it was.
            limit = _limit_from(evidence)
            if limit is not None:
                status, exit_status = "limit_exceeded", _KILLED_EXIT_STATUS
        peak = guest.peak_memory_bytes
        if evidence is not None and evidence.peak_memory_bytes is not None:
            peak = max(peak or 0, evidence.peak_memory_bytes)
        return RunResult(
            status=status,
            exit_status=exit_status,
            has_value=guest.has_value,
            value=guest.value,
            stdout=stdout,
            stderr=stderr,
            truncated=guest.truncated or cut_out or cut_err,
            limit=limit,
            error=guest.error,
            duration_s=time.perf_counter() - began,
            program_duration_s=guest.duration_s,
            cpu_time_s=guest.cpu_time_s,
            peak_memory_bytes=peak,
            started_at=guest.started_at,
            pooled=pooled,
        )

    def _stopped(
        self, began: float, limit: LimitName, pooled: bool, message: str | None = None
    ) -> RunResult:
        evidence = read_evidence(self.id)
        if limit == "timeout" and evidence is not None:
            # A fork bomb keeps the runner busy until the deadline: the pids counter tells
            # what actually stopped the program.
            limit = _limit_from(evidence) or limit
        return RunResult(
            status="limit_exceeded",
            exit_status=_KILLED_EXIT_STATUS,
            has_value=False,
            limit=limit,
            error=ProgramError(type="LimitExceeded", message=message) if message else None,
            duration_s=time.perf_counter() - began,
            peak_memory_bytes=evidence.peak_memory_bytes if evidence else None,
            pooled=pooled,
        )

    async def _runner_died(self, began: float, pooled: bool) -> RunResult:
        evidence = read_evidence(self.id)
        limit = _limit_from(evidence) if evidence else None
        if limit is None:
            with contextlib.suppress(docker.errors.DockerException), map_docker_errors():
                await asyncio.to_thread(self.container.wait, timeout=5)
                await asyncio.to_thread(self.container.reload)
                if self.container.attrs["State"].get("OOMKilled"):
                    limit = "memory"
        if limit is not None:
            return self._stopped(began, limit, pooled)
        return RunResult(
            status="error",
            exit_status=_KILLED_EXIT_STATUS,
            has_value=False,
            error=ProgramError(
                type="RunnerDied", message="the sandbox runner exited before reporting"
            ),
            duration_s=time.perf_counter() - began,
            pooled=pooled,
        )

    def _protocol_error(self, began: float, detail: str, pooled: bool) -> RunResult:
        return RunResult(
            status="protocol_error",
            exit_status=_KILLED_EXIT_STATUS,
            has_value=False,
            error=ProgramError(type="ProtocolError", message=detail),
            duration_s=time.perf_counter() - began,
            pooled=pooled,
        )

    def memory_bytes(self) -> int | None:
        """Memory currently charged to the container, from its cgroup."""
        evidence = read_evidence(self.id)
        return evidence.memory_bytes if evidence else None

    async def destroy(self) -> None:
        """Kill and remove the container and its socket directory. Safe to call twice."""
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
        await _remove(self.container)
        shutil.rmtree(self._socket_dir, ignore_errors=True)


def _limit_from(evidence: CgroupEvidence) -> LimitName | None:
    if evidence.oom_killed:
        return "memory"
    if evidence.pids_limit_hit:
        return "pids"
    return None


def _cap_text(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode("utf-8", errors="replace")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", errors="ignore"), True


def _run_detached(client: docker.DockerClient, config: dict[str, Any]) -> Container:
    with map_docker_errors():
        container = client.containers.run(**config)
    if not isinstance(container, Container):
        raise SandboxFailure("the engine did not return a detached container")
    return container


async def _remove(container: Container) -> None:
    try:
        await asyncio.to_thread(container.remove, force=True)
    except docker.errors.APIError as exc:
        # Gone already, or "removal already in progress": success from our side.
        if exc.status_code not in (404, 409):
            raise SandboxFailure(f"could not remove container {container.id}: {exc}") from exc
