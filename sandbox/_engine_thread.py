"""The threads that calls to the container engine wait in: a pool of their own.

The Docker SDK blocks a thread for each request, up to the client's timeout (30 s) when the
engine is slow or wedged. In the process's default executor those waits would take every
worker (a few per core), and everything else the process hands to a thread would queue
behind them: the decoding of a large frame, the measuring of a final value, an artifact's
files. Runs in containers already started, which need nothing from the engine, would then
stall until the engine answered. So engine calls wait here, and only here.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, ParamSpec, TypeVar

__all__ = ["on_engine_thread"]

P = ParamSpec("P")
T = TypeVar("T")

_ENGINE_THREADS: Final = 32
"""Engine calls waiting at once, at most; more wait for a thread (the engine is slow then)."""
_pool = ThreadPoolExecutor(max_workers=_ENGINE_THREADS, thread_name_prefix="airlock-engine")


async def on_engine_thread(call: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``call(*args, **kwargs)`` on an engine thread, as :func:`asyncio.to_thread` runs it on
    the default executor's (the caller's context variables go with it)."""
    context = contextvars.copy_context()
    bound = functools.partial(context.run, call, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_pool, bound)
