"""The functions a program calls a tool with: ``f(...)``, ``await f.aio(...)``,
``f.batch([...])``, and a write's proposal through ``tools.propose``.

Standard library only; shipped in the image next to the runner. Each function has the tool's
real signature and docstring (from the stub the host sent); arguments are bound to it here, so
a call that cannot bind fails in the program as ``InvalidInput`` and nothing is sent, as does
one whose frame the host would refuse (``airlock_frames.encode_call``: too many bytes, an
integer too long, too deep a value).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    import asyncio
    import inspect  # imported where a signature is built
    from concurrent.futures import Future
    from typing import Any

    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_errors as errors
    from airlock.sandbox.guest.airlock_asyncio import import_asyncio
    from airlock.sandbox.guest.airlock_connection import Connection
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_errors as errors
    import airlock_wire as wire
    from airlock_asyncio import import_asyncio


class _HostDefault:
    """Stands for a default the host's input model computes (not shown in a signature)."""

    def __repr__(self) -> str:
        return "..."


_HOST_DEFAULT = _HostDefault()


class ToolFunction:
    """One tool, callable from a program: ``f(...)``, ``await f.aio(...)``, ``f.batch([...])``."""

    _frame = wire.CALL

    def __init__(self, connection: Connection, stub: dict[str, Any]) -> None:
        self._connection = connection
        # What every frame names; ``name`` only reads it, so a program cannot rename a tool
        # it holds (``fs[0].name = "other"``) into one the program check never saw.
        self._tool = self.__name__ = str(stub["name"])
        self.__doc__ = str(stub.get("doc", ""))
        self._stub = stub
        self._order = tuple(str(p["name"]) for p in stub.get("params", []))
        self._known = frozenset(self._order)
        self._required = frozenset(
            str(p["name"]) for p in stub.get("params", []) if p.get("required", True) is not False
        )

    @property
    def name(self) -> str:
        """The tool this function calls."""
        return self._tool

    def __getattr__(self, name: str) -> Any:
        # The signature is built when first asked for (help(), inspect.signature(), a call
        # with positional arguments, repr()): most programs never need inspect, nor its import.
        if name != "__signature__":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.__signature__ = _signature(self._stub)
        return self.__signature__

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if not args and self._required <= kwargs.keys() <= self._known:
            # Keywords only, all known, none missing (most calls): what binding them to the
            # signature gives, without its cost.
            return {name: kwargs[name] for name in self._order if name in kwargs}
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as exc:
            raise errors.InvalidInput(
                f"{self.name}{self.__signature__}: {exc}",
                issues=[{"field": "", "reason": str(exc)}],
            ) from None
        return dict(bound.arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arguments = self._arguments(args, kwargs)
        return self._connection.call({"type": self._frame, "tool": self._tool, "args": arguments})

    def aio(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """The same call as an awaitable, so independent calls can run concurrently."""
        message = {"type": self._frame, "tool": self._tool, "args": self._arguments(args, kwargs)}
        import_asyncio()
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            on_loop = self._connection.submit_on_loop(message, loop)
            if on_loop is not None:
                return on_loop
        return asyncio.wrap_future(self._connection.submit(message, awaited=True))

    def batch(self, items: list[dict[str, Any]], *, return_errors: bool = False) -> list[Any]:
        """Many calls of this tool in one frame; results in the order of ``items``.

        A failed item raises its error, or with ``return_errors=True`` stands in the list as
        a ``ToolError`` instance.
        """
        arguments = [self._arguments((), dict(item)) for item in items]
        if not arguments:  # nothing to call: no frame (the host counts an empty batch)
            return []
        results = []
        for entry in self._connection.call(
            {"type": wire.BATCH, "tool": self._tool, "items": arguments}
        ):
            if entry.get("ok"):
                results.append(entry.get("value"))
                continue
            error = errors.error_from_wire(entry.get("error"))
            if not return_errors:
                raise error
            results.append(error)
        return results

    def __repr__(self) -> str:
        return f"<tool {self.name}{self.__signature__}>"


def _signature(stub: dict[str, Any]) -> inspect.Signature:
    """A tool's signature from its stub: a parameter the host defaults is optional."""
    import inspect

    params: list[inspect.Parameter] = []
    kind: inspect._ParameterKind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for p in stub.get("params", []):
        required = p.get("required", True) is not False
        if not required:
            # Left out of the call when not given: the host applies the input model's
            # default, exactly as for a direct call. The value here is for reading only.
            default = p.get("default") if p.get("shown_default") else _HOST_DEFAULT
        elif params and params[-1].default is not inspect.Parameter.empty:
            kind = inspect.Parameter.KEYWORD_ONLY  # a required one after an optional one
        params.append(
            inspect.Parameter(
                str(p["name"]),
                kind,
                annotation=str(p.get("annotation", "object")),
                default=inspect.Parameter.empty if required else default,
            )
        )
    return inspect.Signature(params, return_annotation=stub.get("returns", "dict"))


_PROPOSALS_AT_ONCE = 64  # frames in flight at once, well inside the host's in-flight limit


class ProposalFunction(ToolFunction):
    """One write the program may propose: ``f(...)``, ``await f.aio(...)``, ``f.batch([...])``
    each send ``propose`` frames and return ``{preview_id, tool, summary, state}``."""

    _frame = wire.PROPOSE

    def batch(self, items: list[dict[str, Any]], *, return_errors: bool = False) -> list[Any]:
        """Propose many writes of this tool, up to 64 frames in flight at a time; answers in
        the order of ``items`` (failures as for tools)."""
        arguments = [self._arguments((), dict(item)) for item in items]
        results: list[Any] = []
        for start in range(0, len(arguments), _PROPOSALS_AT_ONCE):
            futures: list[Future[Any] | errors.ToolError] = []
            for args in arguments[start : start + _PROPOSALS_AT_ONCE]:
                message = {"type": wire.PROPOSE, "tool": self._tool, "args": args}
                try:
                    futures.append(self._connection.submit(message))
                except errors.InvalidInput as refused:  # nothing sent: its answer, in its place
                    futures.append(refused)
            for future in futures:
                try:
                    if isinstance(future, errors.ToolError):
                        raise future
                    results.append(self._connection.wait(future))
                except errors.ToolError as error:
                    if not return_errors:
                        raise
                    results.append(error)
        return results

    def __repr__(self) -> str:
        return f"<proposal {self.name}{self.__signature__}>"


__all__ = ["ProposalFunction", "ToolFunction"]
