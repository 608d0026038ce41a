"""Docker's errors become sandbox errors in one place: every foreign class, one row each.

The classes come from the two libraries by introspection, so a class a new version adds fails
``test_every_foreign_class_has_a_row`` until the table (and, when needed, the map) says
where it belongs.
"""

from __future__ import annotations

import inspect
from types import ModuleType

import docker.errors
import pytest
import requests.exceptions

import airlock.sandbox
from airlock.sandbox import (
    EngineUnavailable,
    ImageMissing,
    RunnerExited,
    SandboxError,
    SandboxFailure,
    SandboxRefused,
)
from airlock.sandbox._errors import map_docker_errors

# class name -> what it becomes; None: a warning category, issued and never raised
DOCKER: dict[str, type[SandboxError]] = {
    "APIError": SandboxFailure,
    "BuildError": EngineUnavailable,
    "ContainerError": EngineUnavailable,
    "ContextAlreadyExists": EngineUnavailable,
    "ContextException": EngineUnavailable,
    "ContextNotFound": EngineUnavailable,
    "DeprecatedMethod": EngineUnavailable,
    "DockerException": EngineUnavailable,
    "ImageLoadError": EngineUnavailable,
    "ImageNotFound": ImageMissing,
    "InvalidArgument": EngineUnavailable,
    "InvalidConfigFile": EngineUnavailable,
    "InvalidRepository": EngineUnavailable,
    "InvalidVersion": EngineUnavailable,
    "MissingContextParameter": EngineUnavailable,
    "NotFound": SandboxFailure,
    "NullResource": EngineUnavailable,
    "StreamParseError": SandboxFailure,
    "TLSParameterError": EngineUnavailable,
}
REQUESTS: dict[str, type[SandboxError] | None] = {
    "ChunkedEncodingError": EngineUnavailable,
    "ConnectTimeout": EngineUnavailable,
    "ConnectionError": EngineUnavailable,
    "ContentDecodingError": SandboxFailure,
    "FileModeWarning": None,
    "HTTPError": SandboxFailure,
    "InvalidHeader": SandboxFailure,
    "InvalidJSONError": SandboxFailure,
    "InvalidProxyURL": EngineUnavailable,
    "InvalidSchema": EngineUnavailable,
    "InvalidURL": EngineUnavailable,
    "JSONDecodeError": SandboxFailure,
    "MissingSchema": EngineUnavailable,
    "ProxyError": EngineUnavailable,
    "ReadTimeout": EngineUnavailable,
    "RequestException": SandboxFailure,
    "RequestsDependencyWarning": None,
    "RequestsWarning": None,
    "RetryError": EngineUnavailable,
    "SSLError": EngineUnavailable,
    "StreamConsumedError": SandboxFailure,
    "Timeout": EngineUnavailable,
    "TooManyRedirects": SandboxFailure,
    "URLRequired": EngineUnavailable,
    "UnrewindableBodyError": SandboxFailure,
}
CODES = {
    EngineUnavailable: ("sandbox_unavailable", True),
    ImageMissing: ("sandbox_image_missing", False),
    SandboxFailure: ("sandbox_failure", True),
    SandboxRefused: ("sandbox_refused", False),
    RunnerExited: ("sandbox_runner_exited", True),
}


def _classes(module: ModuleType) -> dict[str, type[BaseException]]:
    """The exception classes ``module`` defines (not those it imports from elsewhere)."""
    return {
        name: value
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
    }


def _instance(cls: type[BaseException]) -> BaseException:
    # Most take a message; JSON errors take (message, document, position); the rest say
    # what they need in their signature.
    for args in (("boom",), ("boom", "{", 0)):
        try:
            return cls(*args)
        except TypeError:
            pass
    required = [
        p
        for p in inspect.signature(cls).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return cls(*["boom"] * len(required))


CASES = [
    pytest.param(cls, DOCKER.get(name), id=f"docker.errors.{name}")
    for name, cls in sorted(_classes(docker.errors).items())
] + [
    pytest.param(cls, REQUESTS.get(name, SandboxError), id=f"requests.exceptions.{name}")
    for name, cls in sorted(_classes(requests.exceptions).items())
]


def test_every_foreign_class_has_a_row() -> None:
    assert sorted(_classes(docker.errors)) == sorted(DOCKER)
    assert sorted(_classes(requests.exceptions)) == sorted(REQUESTS)


@pytest.mark.parametrize(("foreign", "expected"), CASES)
def test_each_foreign_error_becomes_one_sandbox_error(
    foreign: type[BaseException], expected: type[SandboxError] | None
) -> None:
    raised = _instance(foreign)
    if expected is None:
        assert issubclass(foreign, Warning)  # only warning categories may pass through
        with pytest.raises(foreign) as passed, map_docker_errors():
            raise raised
        assert passed.value is raised
        return
    with pytest.raises(SandboxError) as caught, map_docker_errors():
        raise raised
    assert type(caught.value) is expected
    assert (caught.value.code, caught.value.retryable) == CODES[expected]
    assert caught.value.__cause__ is raised
    assert str(caught.value)


def test_the_map_is_private_to_the_sandbox_package() -> None:
    assert "map_docker_errors" not in airlock.sandbox.__all__
    assert not hasattr(airlock.sandbox, "map_docker_errors")


def _api_error(status: int, explanation: str) -> docker.errors.APIError:
    response = requests.models.Response()
    response.status_code = status
    return docker.errors.APIError("engine said no", response=response, explanation=explanation)


@pytest.mark.parametrize(
    ("status", "explanation", "expected"),
    [
        # An invalid setting: the same start is refused every time (the pool stops on it).
        (
            400,
            "Range of CPUs is from 0.01 to 2.00, as there are only 2 CPUs available",
            SandboxRefused,
        ),
        (400, "Minimum memoryswap limit should be larger than memory limit", SandboxRefused),
        (404, "No such container: abc", SandboxFailure),
        (409, "Conflict. The container name is already in use", SandboxFailure),
        (500, "failed to create shim task", SandboxFailure),
    ],
)
def test_an_engine_answer_is_retryable_unless_it_refused_the_settings(
    status: int, explanation: str, expected: type[SandboxError]
) -> None:
    with pytest.raises(SandboxError) as caught, map_docker_errors():
        raise _api_error(status, explanation)
    assert type(caught.value) is expected
    assert (caught.value.code, caught.value.retryable) == CODES[expected]
    assert explanation in str(caught.value)
