"""Errors of the sandbox layer, and the one place Docker's errors are translated
(:func:`map_docker_errors`, private to the sandbox package).

    AirlockError
    └── SandboxError               the sandbox could not run a program
        ├── EngineUnavailable      the container engine did not answer (retryable)
        ├── ImageMissing           the sandbox image is not built
        ├── SandboxClosed          the backend was closed; a new one must be started
        ├── SocketPathTooLong      the host's temporary directory is too deep for a socket
        └── SandboxFailure         a container failed to start or died outside the program
            │                      (retryable)
            ├── SandboxRefused     the engine refused the container's settings as invalid
            │                      (every start would be refused the same)
            ├── RunnerExited       a kept container's runner was gone before the program
            │                      reached it (a kept sandbox starts another for it)
            └── StartTimedOut      no container was ready within the run's deadline
                                   (retryable)

A program that fails or hits a limit is not an error here: that is a :class:`RunResult`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import docker.errors
import requests.exceptions

from airlock.policies import AirlockError

__all__ = [
    "EngineUnavailable",
    "ImageMissing",
    "RunnerExited",
    "SandboxClosed",
    "SandboxError",
    "SandboxFailure",
    "SandboxRefused",
    "SocketPathTooLong",
    "StartTimedOut",
    "map_docker_errors",
]


class SandboxError(AirlockError):
    """The sandbox could not run the program; nothing of the program ran to completion."""

    code = "sandbox_error"


class EngineUnavailable(SandboxError):
    """The Docker engine is not reachable."""

    code = "sandbox_unavailable"
    retryable = True


class ImageMissing(SandboxError):
    """The sandbox image does not exist on the engine."""

    code = "sandbox_image_missing"

    def __init__(self, image: str, *, build: str = "make image") -> None:
        super().__init__(f"sandbox image {image!r} not found; build it with `{build}`")
        self.image = image
        self.build = build


class SandboxClosed(SandboxError):
    """The backend (or the kept sandbox a run was for) was closed: no run on it can ever
    succeed, so it is not retryable."""

    code = "sandbox_closed"

    def __init__(self, message: str = "this sandbox backend is closed; start a new DockerBackend"):
        super().__init__(message)


class SocketPathTooLong(SandboxError):
    """A container's bridge socket would have a path longer than a Unix socket's address
    holds; every start would fail the same way until the temporary directory changes."""

    code = "sandbox_socket_path_too_long"

    def __init__(self, path: str, *, limit: int) -> None:
        size = len(os.fsencode(path))
        super().__init__(
            f"the sandbox's bridge socket path {path!r} is {size} bytes; a Unix socket's "
            f"path holds at most {limit}: set TMPDIR to a shorter directory"
        )
        self.path = path
        self.limit = limit


class SandboxFailure(SandboxError):
    """A container could not be started, or its runner failed outside the program."""

    code = "sandbox_failure"
    retryable = True


class RunnerExited(SandboxFailure):
    """A kept container's runner exited before it opened the program's connection: the
    program never reached the container (a :class:`~airlock.sandbox.KeptSandbox` runs it in
    a new one; the state kept in this one is gone). Raised when that new one's runner did
    the same; a retry starts another."""

    code = "sandbox_runner_exited"


class SandboxRefused(SandboxFailure):
    """The engine answered 400 (an invalid parameter): a setting of the profile this engine
    cannot honour, such as more ``cpus`` than the machine has. Starting again fails the same
    way until the profile or the machine changes, so it is not retryable."""

    code = "sandbox_refused"
    retryable = False


class StartTimedOut(SandboxFailure):
    """The engine had not started the run's container (created, started, its runner
    connected) within the run's deadline: a slow or wedged engine. Nothing of the program
    ran; the container is removed whenever the engine answers. Also raised, with
    ``held_back`` set and nothing asked of the engine, when the starts earlier runs gave up on
    (with those still waited for) left no room for another within the deadline
    (:data:`~airlock.sandbox._start_wait.MOST_ABANDONED`). Retryable: a later run may find
    the engine responsive, or a warm container."""

    code = "sandbox_start_timeout"
    retryable = True

    def __init__(
        self, timeout_s: float, *, held_back: bool = False, behind: int = 0, waited: int = 0
    ) -> None:
        super().__init__(
            "the container engine is slow or stalled: the sandbox starts runs gave up waiting"
            f" for ({behind} still in progress, {waited} waited for) left no room for another"
            " while 50 ms of this run's deadline of "
            f"{round(timeout_s, 2):g} s remained; no start was asked for it; try again later"
            if held_back
            else "no sandbox container was ready within the run's deadline of "
            f"{round(timeout_s, 2):g} s (the container engine is slow or stalled); try again, "
            "or raise timeout_s"
        )
        self.timeout_s = timeout_s
        self.held_back = held_back
        """No start was asked for the run: it waited for room (``behind`` starts runs gave
        up on, ``waited`` waited for, were in progress then)."""
        self.behind = behind
        self.waited = waited


@contextmanager
def map_docker_errors() -> Iterator[None]:
    """Translate the Docker SDK's and its HTTP stack's errors into :class:`SandboxError`.

    The one translation of the sandbox package, and private to it: nothing outside
    ``airlock.sandbox`` talks to Docker. Every class of ``docker.errors`` and
    ``requests.exceptions`` lands on one row, the first that matches:

    ===========================================  =================  ========================
    raised                                       becomes            why
    ===========================================  =================  ========================
    ``ImageNotFound``                            ImageMissing       the image is not built
    ``ConnectionError``, ``Timeout``,            EngineUnavailable  no answer came; a retry
    ``ChunkedEncodingError``, ``RetryError``                        may reach the engine
    ``APIError`` with status 400                 SandboxRefused     an invalid setting
    ``APIError`` (``NotFound``, ...)             SandboxFailure     the engine refused
    other ``DockerException``, ``InvalidURL``,   EngineUnavailable  no engine is configured
    ``MissingSchema``, ``InvalidSchema``,                           or reachable where it
    ``URLRequired``                                                 is configured
    other ``RequestException``,                  SandboxFailure     an answer came that
    ``StreamParseError``                                            cannot be used
    ===========================================  =================  ========================

    The warning categories of ``requests.exceptions`` are issued, never raised, and pass
    through.
    """
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageMissing(str(exc.explanation or exc)) from exc
    except (
        requests.exceptions.ConnectionError,
        requests.exceptions.Timeout,
        requests.exceptions.ChunkedEncodingError,
        requests.exceptions.RetryError,
    ) as exc:
        raise EngineUnavailable(f"the Docker engine did not answer: {exc}") from exc
    except docker.errors.APIError as exc:
        if exc.status_code == 400:
            raise SandboxRefused(
                f"the Docker engine refused the container's settings: {exc.explanation or exc}"
            ) from exc
        raise SandboxFailure(f"the Docker engine refused: {exc.explanation or exc}") from exc
    except (
        docker.errors.DockerException,
        requests.exceptions.InvalidURL,
        requests.exceptions.MissingSchema,
        requests.exceptions.InvalidSchema,
        requests.exceptions.URLRequired,
    ) as exc:
        raise EngineUnavailable(f"the Docker engine is not reachable: {exc}") from exc
    except (requests.exceptions.RequestException, docker.errors.StreamParseError) as exc:
        raise SandboxFailure(f"the Docker engine's answer could not be used: {exc}") from exc
