"""The functions a program calls a tool with: ``f(...)``, ``await f.aio(...)``,
``f.batch([...])``, and a write's proposal through ``tools.propose``.

Standard library only; shipped in the image next to the runner. Each function has the tool's
real signature and docstring (from the stub the host sent); arguments are bound to it here, so
a call that cannot bind fails in the program as ``InvalidInput`` and nothing is sent, as does
one whose frame the host would refuse (``airlock_frames.encode_call``: too many bytes, an
integer too long, too deep a value). A parameter whose name is not a Python name (a tool
input's alias such as ``from``) is passed by keyword only, ``**{"from": 1}``.

``f.aio(...)`` made on a running event loop is sent in the loop's turn; made where no loop
runs, it is sent when first awaited (by whichever loop awaits it). Either way it is a
coroutine (``asyncio.iscoroutine``), so ``create_task``, a ``TaskGroup`` and ``asyncio.run``
take it, and ``gather`` and ``wait_for`` take a loop's call as the future it also is.
``f.batch(items)`` sends at most the ``run`` frame's ``max_batch_items`` items a frame (fewer
when their bytes would pass its ``max_call_frame_bytes``), a longer list in several frames one
after another; an item that does not bind (or is not a dict), or whose frame alone is over
the bytes, is ``InvalidInput`` naming its index, raised, or in its place with
``return_errors=True`` while the others are called. Every call waits for one of the run's
``max_in_flight`` slots (``airlock_outbox``).
"""

from __future__ import annotations

import _collections_abc  # loaded with os: where an _AwaitedCall is registered a Coroutine

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    import inspect  # imported where a signature is built
    from collections.abc import Generator
    from concurrent.futures import Future
    from typing import Any

    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_errors as errors
    from airlock.sandbox.guest.airlock_asyncio import import_asyncio
    from airlock.sandbox.guest.airlock_batch_items import bind_items, in_batch, send_batches
    from airlock.sandbox.guest.airlock_connection import Connection
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_errors as errors
    import airlock_wire as wire
    from airlock_asyncio import import_asyncio
    from airlock_batch_items import bind_items, in_batch, send_batches


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
        self._by_keyword: tuple[str, ...] = ()  # names not Python's (set with the signature)

    @property
    def name(self) -> str:
        """The tool this function calls."""
        return self._tool

    def __getattr__(self, name: str) -> Any:
        # The signature is built when first asked for (help(), inspect.signature(), a call
        # with positional arguments, repr()): most programs never need inspect, nor its import.
        if name != "__signature__":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.__signature__, self._by_keyword = _signature(self._stub)
        return self.__signature__

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if not args and self._required <= kwargs.keys() <= self._known:
            # Keywords only, all known, none missing (most calls): what binding them to the
            # signature gives, without its cost.
            return {name: kwargs[name] for name in self._order if name in kwargs}
        try:
            bound = dict(self.__signature__.bind(*args, **kwargs).arguments)
            if self._by_keyword:  # the **kwargs they are passed in
                bound.update(bound.pop(_BY_KEYWORD, {}))
                extra = bound.keys() - self._known
                missing = [n for n in self._by_keyword if n in self._required and n not in bound]
                if extra:
                    raise TypeError(f"got an unexpected keyword argument {min(extra)!r}")
                if missing:
                    raise TypeError(f"missing a required argument: {missing[0]!r}")
        except TypeError as exc:
            raise errors.InvalidInput(
                f"{self.name}{self.__signature__}: {exc}",
                issues=[{"field": "", "reason": str(exc)}],
            ) from None
        return {name: bound[name] for name in self._order if name in bound}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arguments = self._arguments(args, kwargs)
        return self._connection.call({"type": self._frame, "tool": self._tool, "args": arguments})

    def aio(self, *args: Any, **kwargs: Any) -> Any:
        """The same call as an awaitable, so independent calls can run concurrently."""
        message = {"type": self._frame, "tool": self._tool, "args": self._arguments(args, kwargs)}
        import_asyncio()
        import asyncio

        loop = asyncio._get_running_loop()
        if loop is None:  # a future here would belong to no loop that can await it
            return _AwaitedCall(self._connection, message)
        # Sent now, and a coroutine as well: a loop's own call is both (LoopCall); a future a
        # reader thread settles (another loop watches the socket) is wrapped in one.
        call = _submit(self._connection, message, loop)
        if isinstance(call, _collections_abc.Coroutine):
            return call
        return _AwaitedCall(self._connection, message, call)

    def batch(self, items: list[dict[str, Any]], *, return_errors: bool = False) -> list[Any]:
        """Many calls of this tool, ``max_batch_items`` to a frame (fewer when the frame would
        be over ``max_call_frame_bytes``); results in the order of ``items``.

        A failed item raises its error, or with ``return_errors=True`` stands in the list as
        a ``ToolError`` instance (an item that does not bind too, and the others are called).
        """
        bound = bind_items(self, items, return_errors=return_errors)
        return send_batches(self._connection, self._tool, bound, return_errors=return_errors)

    def __repr__(self) -> str:
        return f"<tool {self.name}{self.__signature__}>"


class _AwaitedCall:
    """An awaitable call made where no event loop ran, and a coroutine (registered as one
    below): sent when first awaited or stepped, on the loop that runs it (``asyncio.run``,
    ``create_task``, ``gather`` and ``wait_for`` take it as they take a coroutine). Thrown
    into or closed before that (its task cancelled first), it sends nothing."""

    def __init__(self, connection: Connection, message: dict[str, Any], future: Any = None) -> None:
        self._connection = connection
        self._message = message
        self._future: Any = future  # (given: sent already)
        self._closed = False

    def _call(self) -> Any:
        """The call's future, sent now on the running loop unless it was already."""
        if self._future is None:
            if self._closed:
                raise RuntimeError("cannot reuse already awaited coroutine")
            import asyncio

            self._future = _submit(self._connection, self._message, asyncio.get_running_loop())
        return self._future

    def __await__(self) -> Generator[Any, None, Any]:
        return (yield from self._call().__await__())

    # A task steps it as ``await`` would: a fresh iterator of the future each step yields
    # the future while it is pending and returns its result once it is done.
    def send(self, value: Any) -> Any:
        return self._call().__await__().send(value)

    def throw(self, *exc: Any) -> Any:
        if self._future is None:  # never sent: as a coroutine that never ran, it ends here
            self._closed = True
            return _unstarted().throw(*exc)
        self._future.cancel()  # nothing awaits the call any more: the host cancels it too
        return self._future.__await__().throw(*exc)

    def close(self) -> None:
        if self._future is None:
            self._closed = True
        else:
            self._future.cancel()  # (done: nothing)


_collections_abc.Coroutine.register(_AwaitedCall)


def _unstarted() -> Generator[None, None, None]:
    """A generator that has not run: what is thrown into it is raised as it was given."""
    yield


def _submit(connection: Connection, message: dict[str, Any], loop: Any) -> Any:
    """The future of an awaitable call made on the running ``loop``."""
    on_loop = connection.submit_on_loop(message, loop)
    if on_loop is not None:
        return on_loop
    import asyncio  # another running loop watches the socket: a reader thread reads

    return asyncio.wrap_future(connection.submit(message, loop=loop), loop=loop)


_BY_KEYWORD = "kwargs"  # in a signature, the parameters whose names are not Python's


def _signature(stub: dict[str, Any]) -> tuple[inspect.Signature, tuple[str, ...]]:
    """A tool's signature from its stub (a parameter the host defaults is optional), and
    the parameters it takes in ``**kwargs``: those whose names are not Python's."""
    import inspect
    import keyword

    params: list[inspect.Parameter] = []
    by_keyword: list[str] = []
    annotations: list[str] = []
    kind: inspect._ParameterKind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for p in stub.get("params", []):
        name = str(p["name"])
        if not name.isidentifier() or keyword.iskeyword(name) or name == _BY_KEYWORD:
            by_keyword.append(name)
            annotations.append(str(p.get("annotation", "object")))
            continue
        required = p.get("required", True) is not False
        if not required:
            # Left out of the call when not given: the host applies the input model's
            # default, exactly as for a direct call. The value here is for reading only.
            default = p.get("default") if p.get("shown_default") else _HOST_DEFAULT
        elif params and params[-1].default is not inspect.Parameter.empty:
            kind = inspect.Parameter.KEYWORD_ONLY  # a required one after an optional one
        params.append(
            inspect.Parameter(
                name,
                kind,
                annotation=str(p.get("annotation", "object")),
                default=inspect.Parameter.empty if required else default,
            )
        )
    if by_keyword:
        annotation = " | ".join(dict.fromkeys(annotations))
        params.append(
            inspect.Parameter(_BY_KEYWORD, inspect.Parameter.VAR_KEYWORD, annotation=annotation)
        )
    signature = inspect.Signature(params, return_annotation=stub.get("returns", "dict"))
    return signature, tuple(by_keyword)


_PROPOSALS_AT_ONCE = 64  # frames in flight at once, inside the host's default in-flight limit


class ProposalFunction(ToolFunction):
    """One write the program may propose: ``f(...)``, ``await f.aio(...)``, ``f.batch([...])``
    each send ``propose`` frames and return ``{preview_id, tool, summary, state}``."""

    _frame = wire.PROPOSE

    def batch(self, items: list[dict[str, Any]], *, return_errors: bool = False) -> list[Any]:
        """Propose many writes of this tool, up to 64 frames in flight at a time (fewer when
        the run's ``max_in_flight`` is lower); answers in the order of ``items`` (failures
        as for tools)."""
        arguments = bind_items(self, items, return_errors=return_errors)
        results: list[Any] = []
        at_once = min(_PROPOSALS_AT_ONCE, self._connection.max_in_flight) if arguments else 1
        for start in range(0, len(arguments), at_once):
            futures: list[Future[Any] | errors.ToolError] = []
            for n, args in enumerate(arguments[start : start + at_once], start):
                if isinstance(args, errors.ToolError):  # it did not bind: nothing to send
                    futures.append(args)
                    continue
                message = {"type": wire.PROPOSE, "tool": self._tool, "args": args}
                try:
                    futures.append(self._connection.submit(message))
                except errors.InvalidInput as refused:  # nothing sent: its answer, in its place
                    futures.append(in_batch(refused, n))
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
