"""What leaves a program, each way bounded: its output streams, its descriptors, its value.

Standard library only; shipped in the image next to the runner.

- :func:`isolate_descriptors`: before any program runs, stdin, stdout and stderr lead to
  ``/dev/null`` and every other descriptor but the bridge's is closed. The container's own
  streams are drained by the engine (``dockerd``, ``containerd``); a program that could still
  write to them would bypass the output cap, and the engine would pay for every byte.
- :class:`StreamCapture`: a program's stdout and stderr, captured at the descriptor level
  and capped.
- :func:`too_large`: a final value over the ``run`` frame's ``value_limit`` (bytes of compact
  JSON) or ``value_elements`` (values and keys, as the host counts them in a frame) is refused
  as ``result_too_large`` with its size, so the ``done`` frame stays within the host's budget;
  one the host's frame rules refuse (an integer of more than ``MAX_INT_DIGITS`` digits, too
  deep a nesting: ``airlock_frames.unfit``) as ``InvalidResult``, saying where.
- :func:`program_traceback`: a failed program's traceback, its own lines only, capped.
"""

from __future__ import annotations

import _thread
import errno
import os
import resource
import select

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from typing import Any

    from airlock.sandbox.guest import airlock_frames as frames
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_frames as frames

TRACEBACK_LIMIT = 8 * 1024
VALUE_LIMIT = 4 * 1024 * 1024
VALUE_ELEMENTS = 199_000
"""Defaults of the ``run`` frame's ``value_limit`` and ``value_elements``."""


def isolate_descriptors(keep: int) -> None:
    """Point stdin, stdout and stderr at ``/dev/null`` and close every descriptor but ``keep``
    (the bridge's socket): nothing the program can write to leads out of the container but
    the bridge and its own capped capture pipes."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != null:
            os.dup2(null, fd)
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    top = limit if limit != resource.RLIM_INFINITY else 1 << 20
    os.closerange(3, keep)  # ``null`` among them, unless it took the place of 0, 1 or 2
    os.closerange(keep + 1, max(top, keep + 1))


class StreamCapture:
    """Captures one file descriptor (1 or 2) through a pipe, up to ``limit`` bytes.

    Capturing the descriptor rather than ``sys.stdout`` also catches ``os.write`` and child
    processes. A reader thread empties the pipe while the program runs, so a program that
    writes more than a pipe holds never blocks; when the limit is crossed, ``on_overflow``
    runs on that thread (the program cannot catch that from its own). :meth:`close` takes
    what is left in the pipe itself rather than waiting for the thread to see the end: a
    run then waits for no other thread to wake up. The descriptor it restores afterwards is
    ``/dev/null`` (see :func:`isolate_descriptors`), so the copy it keeps meanwhile leads
    nowhere either.
    """

    def __init__(self, fd: int, limit: int, on_overflow: Any) -> None:
        self.fd = fd
        self.limit = limit
        self.data = bytearray()
        self.truncated = False
        self._on_overflow = on_overflow
        self._closed = False
        # Held while bytes taken from the pipe are added: the thread and close() take turns.
        self._lock = _thread.allocate_lock()
        # A kept program's process starts capturing before its program is known (see
        # :meth:`arm`): starting the reader thread costs a run more than anything else it does.
        self._saved = os.dup(fd)
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.dup2(write_end, fd)
        # The capture's own write end: restoring the descriptor then wakes no one.
        self._write_end: int | None = write_end
        self._read_end = read_end
        # Started without waiting for it to run (as threading.Thread.start would): the
        # thread takes its turn once this one waits for something.
        self._ended = _thread.allocate_lock()
        self._ended.acquire()
        _thread.start_new_thread(self._run, ())

    def _run(self) -> None:
        try:
            self._pump()
        finally:
            self._ended.release()

    def _pump(self) -> None:
        # poll, not select: gVisor refuses select() to the runner.
        waiting = select.poll()
        waiting.register(self._read_end, select.POLLIN)
        while True:
            try:
                waiting.poll()
            except OSError:
                return
            with self._lock:
                if self._closed or not self._take():
                    return

    def _take(self) -> bool:
        """Add what the pipe holds now (the lock held); ``False`` once nothing more will
        come: the pipe's end, or the limit crossed (``on_overflow`` called then)."""
        while True:
            try:
                chunk = os.read(self._read_end, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            room = self.limit - len(self.data)
            if len(chunk) > room:
                self.data += chunk[: max(room, 0)]
                self.truncated = True
                if self._on_overflow is not None:
                    self._on_overflow()
                return False
            self.data += chunk

    def arm(self, limit: int, on_overflow: Any) -> None:
        """Set the limit and the overflow action of a capture started ahead of its program
        (before anything was written to it)."""
        self._on_overflow = on_overflow
        self.limit = limit

    def close(self, *, end_thread: bool = True) -> None:
        """Stop capturing: restore the descriptor and take what the pipe still holds (what a
        child of the program writes later is not the run's output). With ``end_thread``,
        wait for the reader thread to end; without, it sleeps on until the process ends
        (a kept program's process, which exits once it has reported: no wake-up of another
        thread, and no contention with it, on the way of the result)."""
        os.dup2(self._saved, self.fd)
        os.close(self._saved)
        with self._lock:
            if not self._closed and not self.truncated:
                self._take()
            self._closed = True
        if end_thread and self._write_end is not None:
            os.close(self._write_end)  # the thread wakes, sees the capture closed, and ends
            self._write_end = None
            if self._ended.acquire(timeout=0.5):
                self._ended.release()
            os.close(self._read_end)

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def too_large(
    value: Any, text: str, limit_bytes: int, limit_elements: int
) -> dict[str, Any] | None:
    """The ``ResultTooLarge`` error (wire form) of a final ``value`` whose compact JSON is
    ``text``, when it is over either limit, or the ``InvalidResult`` error of one the host's
    frame rules refuse; ``None`` when it fits."""
    advice = "return a summary (counts, totals, the few records that matter) instead"
    if len(text) > limit_bytes:
        return {
            "type": "ResultTooLarge",
            "code": "result_too_large",
            "message": f"the final value is {len(text)} bytes of JSON; the limit is "
            f"{limit_bytes}: {advice}",
            "size_bytes": len(text),
            "limit_bytes": limit_bytes,
        }
    # Each value and key takes a byte at least: a short text cannot hold too many.
    if len(text) > limit_elements and value_elements(value) > limit_elements:
        return {
            "type": "ResultTooLarge",
            "code": "result_too_large",
            "message": f"the final value holds more than {limit_elements} values and keys: "
            f"{advice}",
            "size_bytes": len(text),
        }
    # The done frame holds the value two levels down: {"type": "done", "result": {"value"}}.
    found = frames.unfit(value, 2) if frames.suspect(text.encode(), 2) else None
    if found is not None:
        where = f" at {found[0]!r}" if found[0] else ""
        return {"type": "InvalidResult", "message": f"the final value{where} {found[1]}"}
    return None


def value_elements(value: Any) -> int:
    """Values and keys of ``value`` as the host counts them in a frame
    (``airlock.bridge.count_elements``): every value, every key, and one more for each empty
    container."""
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            count += len(item) + (not item)
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            count += not item
            stack.extend(item)
    return count


def limit_of(exc: BaseException, out_dir: str) -> str | None:
    """The limit an exception of the program's shows it hit (``memory``, ``disk``, or
    ``artifacts`` when ``out_dir`` is the full one), or ``None``."""
    kind = type(exc)  # (not isinstance: the program's class may make __class__ raise)
    if issubclass(kind, MemoryError):
        return "memory"
    try:  # (the program's subclass may make errno raise, or be no int)
        number = exc.errno if issubclass(kind, OSError) else None  # type: ignore[attr-defined]
        no_space = type(number) is int and number == errno.ENOSPC
    except BaseException:
        return None
    if no_space:
        return "artifacts" if is_full(out_dir) else "disk"
    return None


def is_full(path: str) -> bool:
    """Whether the file system at ``path`` (``/out``) has less than a page, or no inode,
    left."""
    try:
        info = os.statvfs(path)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < 4096 or (info.f_files > 0 and info.f_favail == 0)


def usage() -> tuple[float, int]:
    """CPU seconds and peak memory (bytes) of this process and its children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    peak_kib = max(own.ru_maxrss, children.ru_maxrss)
    return cpu, peak_kib * 1024


def failure_of(
    exc: BaseException, filename: str, *, tool_errors: tuple[type, Any]
) -> dict[str, Any]:
    """A failed program's error: its exception's type name, message and traceback (its own
    lines, :func:`program_traceback`), and the ``code`` of a tool error it did not catch
    (``tool_errors``: the class, and the codes the host knows). The exception is the
    program's: its class may make what these read raise (``__str__``, a metaclass's
    ``__name__``, an exception group's ``exceptions``, ``code``); what cannot be read is said
    so, and the runner still reports."""
    # Past any metaclass's __name__, and as a plain str (a class's name may be a str
    # subclass of the program's, whose methods are its own).
    name = _plain(type.__dict__["__name__"].__get__(type(exc)))[:_NAME_CHARS]
    failure: dict[str, Any] = {"type": name}
    try:
        code = exc.code if isinstance(exc, tool_errors[0]) else None  # type: ignore[attr-defined]
        if type(code) is str and code in tool_errors[1]:
            failure["code"] = code
    except BaseException:
        pass
    try:
        message = _plain(str(exc))[:TRACEBACK_LIMIT]
    except BaseException:
        message = f"(the {name}'s message could not be read)"
    try:
        trace = program_traceback(exc, filename)
    except BaseException:
        trace = f"{name}: (its traceback could not be read)"
    return {**failure, "message": message, "traceback": trace}


_NAME_CHARS = 200
"""The most characters of an exception's type name a result carries."""


def _plain(text: str) -> str:
    """``text`` as a plain str: a str subclass's own ``__getitem__`` or ``__format__`` (the
    program's) would run on every later use."""
    return str.__str__(text)


def exit_status_of(exc: SystemExit) -> int:
    """The exit status a program's ``sys.exit(code)`` asks for: ``code`` when it is an int
    from 0 to 255, 0 for None, else 1 (an int of 5,000 digits cannot even be written out);
    1 when its class (the program's) makes ``code`` raise."""
    try:
        code = exc.code
        if type(code) is int:  # (not isinstance: an object may claim int as its __class__)
            return code if 0 <= code <= 255 else 1
        return 0 if code is None else 1
    except BaseException:
        return 1


def program_traceback(exc: BaseException, filename: str) -> str:
    """The lines of ``exc``'s traceback in the program's code (``filename``), and the
    exception, at most :data:`TRACEBACK_LIMIT` characters."""
    import traceback  # when a program fails: it imports re and ast

    frames = [
        frame for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == filename
    ]
    text = "".join(traceback.format_list(frames))
    text += "".join(traceback.format_exception_only(type(exc), exc))
    return text[-TRACEBACK_LIMIT:]


__all__ = [
    "TRACEBACK_LIMIT",
    "VALUE_ELEMENTS",
    "VALUE_LIMIT",
    "StreamCapture",
    "exit_status_of",
    "failure_of",
    "is_full",
    "isolate_descriptors",
    "limit_of",
    "program_traceback",
    "too_large",
    "usage",
    "value_elements",
]
