"""The guest's connection to the host: frames over the bridge socket, with results matched to
pending calls by id.

Standard library only; shipped in the image next to the runner. Calls made by a program's
threads (:meth:`Connection.call`, :meth:`Connection.submit` and :meth:`Connection.wait`) and
awaitable calls served by a running event loop (:meth:`Connection.submit_on_loop`) share one
state: the pending calls, their ``max_in_flight`` slots, whoever reads the socket for them,
and the abort that fails them all. The ``tools`` namespace that calls through it is
``airlock_bridge``.
"""

from __future__ import annotations

import _socket
import _thread  # its locks; threading (functools, collections) only for a reader thread
import itertools

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    # What a runner imports before its first program is CPU that every container spends:
    # asyncio is loaded by whoever makes an awaitable call (airlock_asyncio), before an event
    # loop's future can be pending here; concurrent.futures by the first call that needs a
    # thread-safe future (most programs make none); the socket module's enumerations are
    # never needed (_socket is the socket).
    import asyncio
    from concurrent.futures import Future
    from typing import Any

    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_errors as errors
    from airlock.sandbox.guest import airlock_frames as frames
    from airlock.sandbox.guest.airlock_bridge_socket import BridgeSocket
    from airlock.sandbox.guest.airlock_call_futures import loop_call, of_loop, settle, watch_cancel
    from airlock.sandbox.guest.airlock_outbox import Outbox
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_errors as errors
    import airlock_frames as frames
    import airlock_wire as wire
    from airlock_bridge_socket import BridgeSocket
    from airlock_call_futures import loop_call, of_loop, settle, watch_cancel
    from airlock_outbox import Outbox

_BUSY_RETRY_S = 0.0005  # how soon a loop looks again while a waiting thread reads for it
_SLOT_RETRY_S = 0.002  # how soon a thread waiting for a slot looks whether it must read


class Connection(BridgeSocket):
    """Frames over the bridge socket, with results matched to pending calls by id.

    Results may come back in any order. No reader thread is permanent: a thread that waits
    for a synchronous result reads the socket itself (one thread switch fewer per call),
    handing other calls' results to their futures. Awaitable calls made on a running event
    loop are served by that loop: their frames leave together once per turn (one system
    call for all the calls a turn made), and while any is pending the loop watches the
    socket and resolves their futures in its own thread (no wake-up from another thread per
    result); those made while another running loop watches fall back to a reader thread,
    which exits when none are left. At most ``max_in_flight`` calls of any kind are
    unanswered at once (an awaitable call past them is held, a thread's waits), and a call
    the program cancels is cancelled on the host too (:class:`~airlock_outbox.Outbox`).
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._read_lock = _thread.allocate_lock()
        self._state_lock = _thread.allocate_lock()
        self._pending: dict[int, Future[Any] | asyncio.Future[Any]] = {}
        self._awaited: set[int] = set()
        self._reader_running = False
        self._ids = itertools.count(1)
        self._aborted: errors.RunAborted | None = None
        self._outbox = Outbox(self._write, self._closed)
        self.max_batch_items = wire.MAX_BATCH_ITEMS
        """Items of one ``batch`` frame, at most (the ``run`` frame's)."""
        self._watcher: asyncio.AbstractEventLoop | None = None  # the loop reading for them
        self._watched = 0  # awaitable calls of the watching loop not answered yet

    def send(self, message: dict[str, Any]) -> None:
        self._outbox.send(frames.encode(message))

    def _closed(self) -> None:
        self._abort(errors.RunAborted("protocol_error", "the bridge to the host is closed"))

    def recv(self) -> dict[str, Any]:
        """The next frame from the host, waiting for it (one reader at a time); a ``run``
        frame's limits hold this connection's calls from then on (:meth:`take_limits`)."""
        message = self._recv()
        if message.get("type") == wire.RUN:
            self.take_limits(message)
        return message

    def take_limits(self, request: dict[str, Any]) -> None:
        """Hold calls to the ``run`` frame ``request``'s ``max_in_flight`` and
        ``max_batch_items`` (the contract's defaults for what it does not say)."""
        self._outbox.slots = frames.count(request.get("max_in_flight"), wire.MAX_IN_FLIGHT)
        self.max_batch_items = frames.count(request.get("max_batch_items"), wire.MAX_BATCH_ITEMS)

    @property
    def max_in_flight(self) -> int:
        """Calls sent and unanswered at once, at most (the ``run`` frame's)."""
        return self._outbox.slots

    def _dispatch_received(self, here: asyncio.AbstractEventLoop | None = None) -> None:
        """Dispatch every whole frame already received (``here``: as :meth:`_dispatch`). A
        reader that stops reading does this before it lets the read lock go: the bytes it read
        past its own answer may hold other calls' results, and a loop watching the socket
        wakes for new bytes only, so a result left here would never reach its call."""
        while (frame := self._next_frame()) is not None:
            self._dispatch(frame, here=here)

    # -- calls ----------------------------------------------------------------------------

    def call(self, message: dict[str, Any]) -> Any:
        """Send a call or batch frame and wait for its result (or raise its error).

        When no other thread reads the socket, this one sends and reads its own answer with
        blocking system calls: no future, no other thread, no selector (the loop of single
        calls a program makes pays for nothing else). Otherwise as :meth:`submit` and
        :meth:`wait`.
        """
        with self._state_lock:
            if self._aborted is not None:
                raise self._aborted
        message["id"] = call_id = next(self._ids)
        # (a value JSON or the host cannot hold raises here, to the program)
        frame = frames.encode_call(message)
        self._take_slot(call_id)
        if not self._read_lock.acquire(blocking=False):
            return self.wait(self._pend_taken(call_id, frame))
        sent = True  # (sendall raises a signal handler's error after its bytes left: sent)
        try:
            try:
                self._outbox.send(frame)
                while True:
                    answer = self._recv()
                    if answer.get("id") == call_id and answer.get("type") == wire.RESULT:
                        break
                    self._dispatch(answer)  # another thread's result, or the host's abort
                    if self._aborted is not None:
                        raise self._aborted
                sent = False
                self._outbox.answered()
                self._dispatch_received()
            except (ConnectionError, OSError, ValueError):
                closed = errors.RunAborted("protocol_error", "the bridge to the host is closed")
                self._abort(closed)
                raise (self._aborted or closed) from None
        finally:
            if sent:  # before another reader may take its answer
                self._let_go(call_id, sent=True)
            self._read_lock.release()
        if answer.get("ok"):
            return answer.get("value")
        raise errors.error_from_wire(answer.get("error"))

    def submit(
        self, message: dict[str, Any], *, loop: asyncio.AbstractEventLoop | None = None
    ) -> Future[Any]:
        """Send a call or batch frame; the future holds its result. The calling thread waits
        while ``max_in_flight`` calls are unanswered.

        ``loop``: the running event loop that will await the call (a reader thread then
        reads); its frame is then held as an awaitable call's is, and nothing waits.
        """
        call_id = next(self._ids)  # (atomic) before the frame: a refused one is never pending
        frame = frames.encode_call({**message, "id": call_id})
        if loop is None:
            self._take_slot(call_id)
            return self._pend_taken(call_id, frame)
        return self._pend(call_id, frame, loop)

    def _pend_taken(self, call_id: int, frame: bytes) -> Future[Any]:
        """A thread's call ``call_id`` that has its slot, pending (its answer frees it)."""
        try:
            return self._pend(call_id, frame, None)
        except BaseException:
            self._let_go(call_id, sent=False)
            raise

    def _let_go(self, call_id: int, *, sent: bool) -> None:
        """Call ``call_id``'s thread ends its wait by an error (a signal handler's): its slot
        is free now. If its frame may have left, a ``cancel`` frame tells the host (which
        ignores one it answered) and a late answer is dropped: waiting for it would keep the
        slot when it never comes (the frame did not leave) or came (read before the error)."""
        with self._state_lock:
            if self._aborted is not None or call_id in self._pending:
                return  # the run is over, or its pending future's answer frees it
        if sent:
            self._outbox.cancel(call_id, None)
        else:
            self._outbox.answered()

    def _pend(
        self, call_id: int, frame: bytes, loop: asyncio.AbstractEventLoop | None
    ) -> Future[Any]:
        from concurrent.futures import Future

        future: Future[Any] = Future()
        with self._state_lock:
            if self._aborted is not None:
                raise self._aborted
            self._pending[call_id] = future
            if loop is not None:
                watch_cancel(future, call_id, self._cancelled)
                self._awaited.add(call_id)
                if not self._reader_running:
                    self._reader_running = True
                    import threading  # loaded already: asyncio imports it

                    threading.Thread(target=self._read_for_loop, daemon=True).start()
        if loop is None:
            self._outbox.send(frame)
        else:
            self._outbox.add(call_id, frame, loop)
        return future

    def _take_slot(self, call_id: int) -> None:
        """Wait for call ``call_id``'s slot, meanwhile sending the frames that wait for a
        loop's turn (this thread may block that loop) and reading when nobody else does."""
        gate = self._outbox.take(call_id)
        if gate is None:
            return
        try:
            while not gate.acquire(blocking=False):
                if self._aborted is not None:
                    raise self._aborted
                self._outbox.send_queued()  # its loop may be the one this call blocks
                if not self._read_lock.acquire(blocking=False):
                    if gate.acquire(timeout=_SLOT_RETRY_S):  # another thread reads meanwhile
                        break
                    continue
                try:
                    if (frame := self._next_frame()) is not None:
                        self._dispatch(frame)
                    elif self._fill_within(_SLOT_RETRY_S):
                        self._dispatch_received()
                except (ConnectionError, OSError, ValueError):
                    self._closed()
                finally:
                    self._read_lock.release()
            if self._aborted is not None:  # woken by the run's end
                raise self._aborted
        except BaseException:
            self._outbox.withdraw(call_id)
            raise

    def submit_on_loop(
        self, message: dict[str, Any], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[Any] | None:
        """Queue a call or batch frame of an awaitable call made on the running ``loop``; the
        future holds its result. ``None`` when another running loop watches the socket (the
        caller then uses :meth:`submit` with ``loop``)."""
        with self._state_lock:
            watcher = self._watcher
            if watcher is not loop:
                if watcher is not None and not watcher.is_closed() and watcher.is_running():
                    return None
                # The last watcher stopped: its unanswered calls' results are read here now.
                self._watcher = loop
                loop.add_reader(self._sock.fileno(), self._on_readable, loop)
        message["id"] = call_id = next(self._ids)
        frame = frames.encode_call(message)  # (refused: nothing is pending)
        with self._state_lock:
            if self._aborted is not None:
                raise self._aborted
            future: asyncio.Future[Any] = loop_call(loop, call_id, self._cancelled)
            self._pending[call_id] = future
            self._watched += 1
        self._outbox.add(call_id, frame, loop)  # sent in this turn, or once a slot is free
        return future

    def _cancelled(self, call_id: int) -> None:
        """The program cancelled call ``call_id`` before its answer came: the host is told
        unless its frame never left (an answer that comes all the same is dropped)."""
        with self._state_lock:
            future = self._pending.pop(call_id, None)
            if future is None:
                return  # answered meanwhile, or the run aborted
            self._awaited.discard(call_id)
            loop = future.get_loop() if of_loop(future) else None
            if loop is not None:
                self._watched -= 1
        self._outbox.cancel(call_id, loop)

    def _on_readable(self, loop: asyncio.AbstractEventLoop) -> None:
        # Called by a watching loop when the socket has bytes.
        fd = self._sock.fileno()
        if self._watcher is not loop:  # another loop took over: leave the reading to it
            loop.remove_reader(fd)
            return
        if not self._read_lock.acquire(blocking=False):
            # A thread waiting for its own result holds the read lock and reads for everyone
            # meanwhile: look again shortly, rather than spin on a socket that stays readable
            # (or, with no call of this loop waiting, stop watching: the bytes are not ours).
            loop.remove_reader(fd)
            with self._state_lock:
                keep = self._watcher is loop and self._watched > 0
                if not keep and self._watcher is loop:
                    self._watcher = None
            if keep:
                loop.call_later(_BUSY_RETRY_S, self._rearm, loop)
            return
        try:
            self._fill(_socket.MSG_DONTWAIT)
            self._dispatch_received(here=loop)
        except BlockingIOError:
            pass  # another reader took the bytes first
        except (ConnectionError, OSError, ValueError):
            self._closed()
        finally:
            self._read_lock.release()
        with self._state_lock:
            # Answered calls do not end the watch: a program that awaits one call after
            # another would register the socket again for each (two system calls a call).
            # The watch ends with the loop, with the run, or when the bytes are another's.
            ended = self._watcher is loop and self._aborted is not None
            if ended:
                self._watcher = None
        if ended:
            loop.remove_reader(fd)

    def _rearm(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._state_lock:
            if self._watcher is loop and not loop.is_closed():
                loop.add_reader(self._sock.fileno(), self._on_readable, loop)

    def wait(self, future: Future[Any]) -> Any:
        """The result of a call this thread waits for, reading the socket when nobody is."""
        while not future.done():
            if self._read_lock.acquire(blocking=False):
                try:
                    while not future.done():
                        self._dispatch(self._recv())
                    self._dispatch_received()
                except (ConnectionError, OSError, ValueError):
                    self._closed()
                finally:
                    self._read_lock.release()
            else:
                # Another thread reads and will resolve this future, or stop reading soon.
                try:
                    return future.result(timeout=0.001)
                except TimeoutError:
                    continue
        return future.result()

    def _read_for_loop(self) -> None:
        with self._read_lock:
            try:
                while True:
                    with self._state_lock:
                        if not self._awaited or self._aborted is not None:
                            self._reader_running = False
                            break
                    self._dispatch(self._recv())
                self._dispatch_received()
            except (ConnectionError, OSError, ValueError):
                self._closed()
            finally:
                with self._state_lock:
                    self._reader_running = False

    def _dispatch(
        self, frame: dict[str, Any], *, here: asyncio.AbstractEventLoop | None = None
    ) -> None:
        """Hand a result frame to its call's future, or an abort to every call; ``here`` is
        the event loop running in this thread, when the caller knows it."""
        kind = frame.get("type")
        if kind == wire.ABORT:
            self._abort(errors.RunAborted(str(frame.get("code")), str(frame.get("message"))))
            return
        if kind != wire.RESULT:
            return
        call_id = frame.get("id")
        with self._state_lock:
            future = self._pending.pop(call_id, None)  # type: ignore[arg-type]
            if future is None:
                return
            if self._awaited:
                self._awaited.discard(call_id)
            if of_loop(future):
                self._watched -= 1
        self._outbox.answered()
        if frame.get("ok"):
            settle(future, frame.get("value"), None, here)
        else:
            settle(future, None, errors.error_from_wire(frame.get("error")), here)

    def _abort(self, signal: errors.RunAborted) -> None:
        with self._state_lock:
            if self._aborted is None:
                self._aborted = signal
            pending, self._pending = self._pending, {}
            self._awaited.clear()
            self._watched = 0
        self._outbox.drop_held()
        for future in pending.values():
            settle(future, None, signal)


__all__ = ["Connection"]
