"""Errors of the sandbox layer, and the one place Docker's errors are translated
(:func:`map_docker_errors`, private to the sandbox package).

    AirlockError
    └── SandboxError               the sandbox could not run a program
        ├── EngineUnavailable      the container engine did not answer (retryable)
        ├── ImageMissing           the sandbox image is not built
        └── SandboxFailure         a container failed to start or died outside the program

A program that fails or hits a limit is not an error here: that is a :class:`RunResult`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import docker.errors
import requests.exceptions

from airlock.policies import AirlockError

__all__ = [
    "EngineUnavailable",
    "ImageMissing",
    "SandboxError",
    "SandboxFailure",
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


class SandboxFailure(SandboxError):
    """A container could not be started, or its runner failed outside the program."""

    code = "sandbox_failure"
    retryable = True


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
