"""Calling user code that may be sync or async: handlers, ``prepare``, ``commit``, ``lookup``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import anyio.to_thread

__all__ = ["invoke", "is_async_callable"]


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` returns a coroutine: a coroutine function, or an object whose
    ``__call__`` is one."""
    call_method = getattr(type(fn), "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call_method)


async def invoke(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``: awaited when async, else in a worker thread, so a slow sync function
    never blocks the event loop. A cancelled caller abandons the thread (it cannot be
    stopped), which is why callers bound every call with a deadline."""
    if is_async_callable(fn):
        return await fn(*args, **kwargs)
    call = functools.partial(fn, *args, **kwargs)
    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
