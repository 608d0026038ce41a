"""What the guest's connection sends the host, and when: frames at once, or the frames of
awaitable calls made on a running event loop once per turn of that loop; and at most
``max_in_flight`` calls of any kind unanswered at once.

Standard library only; shipped in the image next to the runner. The host ends a run that
has more than its ``max_in_flight`` calls unanswered, a limit the program is not meant to
meet: a ``gather`` of a thousand awaitable calls, or a pool of threads each making calls, are
documented ways to fan out. So every ``call``, ``batch`` and ``propose`` frame takes one of
``max_in_flight`` slots, in the order the calls were made: the frame of an awaitable call
past them waits here, and each answer sends the next; a thread whose call finds none free
waits for one (:meth:`Outbox.take`; the connection reads answers meanwhile). A call the
program cancels leaves no trace when its frame has not left yet (held, or in the outbox);
once it has, a ``cancel`` frame tells the host, which cancels it, answers nothing and frees
its slot: so does this side, at once.
"""

from __future__ import annotations

import _thread
import sys

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    Held = tuple[bytes, asyncio.AbstractEventLoop] | _thread.LockType  # a frame, or a thread

    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_frames as frames
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_frames as frames
    import airlock_wire as wire


class Outbox:
    """Frames for the host, written with ``write`` (``on_closed()`` when a write on a
    loop's turn finds the bridge closed)."""

    def __init__(self, write: Callable[[bytes], None], on_closed: Callable[[], None]) -> None:
        self._write = write
        self._on_closed = on_closed
        self.lock = _thread.allocate_lock()
        """Held while frames are written: one frame's bytes are never cut by another's."""
        self._queued: dict[int, bytes] = {}  # by call id (a ``cancel`` frame's: minus it)
        # Waiting for a slot, first come first served: a loop's frame, or the lock a thread
        # waits on (released when the slot is its).
        self._held: dict[int, Held] = {}
        self._flushing: asyncio.AbstractEventLoop | None = None  # where a flush is due
        self.slots = wire.MAX_IN_FLIGHT
        """Calls sent and unanswered at once, at most."""
        self._sent = 0  # calls sent (or queued, or given a slot) and not answered nor cancelled
        self._dropped = False  # the run is over: a thread woken from its wait had no slot

    def send(self, frame: bytes) -> None:
        """Write ``frame`` now, after the frames queued before it."""
        with self.lock:
            if self._queued:
                frame = b"".join(self._queued.values()) + frame
                self._queued.clear()
            self._write(frame)

    def add(self, call_id: int, frame: bytes, loop: asyncio.AbstractEventLoop) -> None:
        """Send the frame of an awaitable call made on the running ``loop`` in the loop's
        next turn, or once a slot is free."""
        with self.lock:
            if self._held or self._sent >= self.slots:
                self._held[call_id] = (frame, loop)
                return
            self._sent += 1
        self._queue(call_id, frame, loop)

    def take(self, call_id: int) -> _thread.LockType | None:
        """A slot for call ``call_id`` of a thread that will send its frame itself: ``None``
        when it has one now, else a lock released once it has (after the calls held before
        it); :meth:`withdraw` if the thread stops waiting."""
        with self.lock:
            if not self._held and self._sent < self.slots:
                self._sent += 1
                return None
            gate = _thread.allocate_lock()
            gate.acquire()
            self._held[call_id] = gate
            return gate

    def withdraw(self, call_id: int) -> None:
        """The thread waiting for call ``call_id``'s slot (:meth:`take`) sends nothing."""
        with self.lock:
            if self._held.pop(call_id, None) is not None or self._dropped:
                return  # not given one yet (or woken by the run's end, without one)
        self.answered()  # given one meanwhile: the next call takes it

    def answered(self) -> None:
        """A call was answered (or will send nothing): its slot goes to the first held one."""
        with self.lock:
            self._sent -= 1
            if not self._held or self._sent >= self.slots:
                return
            call_id = next(iter(self._held))
            entry = self._held.pop(call_id)
            self._sent += 1
            if not isinstance(entry, tuple):
                entry.release()  # a thread's: it sends its frame now
                return
        frame, loop = entry
        self._queue(call_id, frame, loop)

    def cancel(self, call_id: int, loop: asyncio.AbstractEventLoop | None) -> None:
        """The program cancelled call ``call_id`` (of ``loop``, or made from a thread:
        ``None``) before its answer came."""
        with self.lock:
            if self._held.pop(call_id, None) is not None:
                return  # never sent, nor counted
            if self._queued.pop(call_id, None) is not None:
                cancel = None  # it never left
            else:
                cancel = frames.encode({"type": wire.CANCEL, "id": call_id})
                if loop is None:  # sent at once, as the call was
                    import contextlib  # loaded already: asyncio imports it

                    with contextlib.suppress(OSError):  # closed: the run is over anyway
                        self._write(b"".join(self._queued.values()) + cancel)
                    self._queued.clear()
                    cancel = None
        if cancel is not None:
            self._queue(-call_id, cancel, loop)  # type: ignore[arg-type]
        self.answered()

    def drop_held(self) -> None:
        """The run is over: the held frames never go (the threads that wait for a slot wake
        to find the run's end)."""
        with self.lock:
            self._dropped = True
            for entry in self._held.values():
                if not isinstance(entry, tuple):
                    entry.release()
            self._held.clear()

    def _queue(self, key: int, frame: bytes, loop: asyncio.AbstractEventLoop) -> None:
        with self.lock:
            self._queued[key] = frame
            # Once per turn of this loop (a flush left pending on a loop that has since
            # ended must not hold back the frames queued after it).
            schedule = self._flushing is not loop
            self._flushing = loop
        if not schedule:
            return
        if sys.modules["asyncio"]._get_running_loop() is loop:
            loop.call_soon(self.flush)
            return
        import contextlib  # loaded already: asyncio imports it

        # A slot freed by a reader in another thread; a closed loop's frames go with the
        # next frame sent.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self.flush)

    def send_queued(self) -> None:
        """Write the queued frames now, from any thread: a thread that waits for a slot sends
        them (the loop whose turn would may be the one it blocks, their answers the slots
        it waits for); that turn's flush still comes, and finds what was queued since."""
        self._write_queued(turn=False)

    def flush(self) -> None:
        """Write the queued frames (on a loop's turn)."""
        self._write_queued(turn=True)

    def _write_queued(self, *, turn: bool) -> None:
        with self.lock:
            if turn:
                self._flushing = None
            if not self._queued:
                return
            data = b"".join(self._queued.values())
            self._queued.clear()
            try:
                self._write(data)
            except OSError:
                failed = True
            else:
                failed = False
        if failed:
            self._on_closed()


__all__ = ["Outbox"]
