"""Who is logged in to the approval page: server-side sessions, each with its own CSRF token.

Logging in with the service token opens a session; the browser holds only its random id, in an
HttpOnly, SameSite=Strict cookie (scripts cannot read it, other sites' pages do not send it). Every
form the page shows carries the session's CSRF token in a hidden field, and every POST is checked
against it, so a page elsewhere cannot make a logged-in browser decide a repair. Sessions are kept
in memory, at most `limit` of them (the oldest go first), each for `lifetime` seconds after its last
use.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "daifu_session"
LIFETIME = 12 * 3600.0


@dataclass
class Session:
    """A logged-in browser: the name it decides under, its CSRF token, when it was last used."""

    id: str
    name: str
    csrf: str
    last_used: float

    def csrf_ok(self, given: str | None) -> bool:
        return given is not None and secrets.compare_digest(given.encode(), self.csrf.encode())


class Sessions:
    """The open sessions, bounded in number and in idle time."""

    def __init__(
        self, limit: int = 256, lifetime: float = LIFETIME, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.lifetime = lifetime
        self.clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def open(self, name: str) -> Session:
        """A new session deciding as `name`."""
        while len(self._sessions) >= self.limit:
            self._sessions.popitem(last=False)
        session = Session(secrets.token_urlsafe(32), name, secrets.token_urlsafe(32), self.clock())
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id; `None` for an unknown or expired one."""
        session = self._sessions.get(session_id or "")
        if session is None:
            return None
        now = self.clock()
        if now - session.last_used > self.lifetime:
            del self._sessions[session.id]
            return None
        session.last_used = now
        self._sessions.move_to_end(session.id)
        return session

    def close(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
