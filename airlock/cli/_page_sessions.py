"""Who may use the approval page: the browser sessions its link opens, the CSRF tokens its
forms carry, and the one message each session sees after a post.

A session lasts ``SESSION_TTL`` from the link's use (the cookie's Max-Age says the same), so
a cookie that leaked stops working; the printed link opens a new one. A CSRF token is bound
to the session it was rendered for and lasts ``CSRF_TTL``. Both are held in memory and capped
in number, oldest out first.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["CSRF_TTL", "SESSION_TTL", "PageSessions"]

SESSION_TTL = 4 * 3600.0
CSRF_TTL = 900.0
_MAX_TOKENS = 10_000


class PageSessions:
    """The page's sessions and CSRF tokens.

    Args:
        clock: wall-clock time (tests move it).
    """

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._sessions: OrderedDict[str, float] = OrderedDict()
        """Session id to when it ends, oldest first."""
        self._csrf: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._flash: dict[str, tuple[str, str]] = {}

    def open(self) -> str:
        """A new session, for a browser that opened the link."""
        now = self.clock()
        session = secrets.token_urlsafe(32)
        self._sessions[session] = now + SESSION_TTL
        while self._sessions and (
            len(self._sessions) > _MAX_TOKENS or next(iter(self._sessions.values())) <= now
        ):
            oldest, _ = self._sessions.popitem(last=False)
            self._flash.pop(oldest, None)
        return session

    def valid(self, session: str) -> bool:
        """Whether ``session`` is one this page opened and has not ended."""
        ends = self._sessions.get(session)
        if ends is None:
            return False
        if ends <= self.clock():
            del self._sessions[session]
            self._flash.pop(session, None)
            return False
        return True

    def issue_csrf(self, session: str) -> str:
        """A CSRF token for one rendering of the page in ``session``."""
        now = self.clock()
        token = secrets.token_urlsafe(32)
        self._csrf[token] = (session, now + CSRF_TTL)
        while self._csrf and (
            len(self._csrf) > _MAX_TOKENS or next(iter(self._csrf.values()))[1] < now
        ):
            self._csrf.popitem(last=False)
        return token

    def csrf_valid(self, token: str, session: str) -> bool:
        """Whether ``token`` was rendered for ``session`` and is still fresh."""
        issued = self._csrf.get(token)
        return issued is not None and issued[0] == session and issued[1] >= self.clock()

    def tell(self, session: str, kind: str, text: str) -> None:
        """Keep ``text`` (a ``notice`` or an ``error``) for the session's next page."""
        self._flash[session] = (kind, text)

    def told(self, session: str) -> tuple[str, str] | None:
        """The message kept for the session, once."""
        return self._flash.pop(session, None)
