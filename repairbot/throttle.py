"""How many wrong tokens the approval page's login takes: a few per address per minute, then none.

The login form compares a guess with the service token; without a limit, a client could guess as
fast as the service answers. `LoginThrottle` counts each address's failed logins over a sliding
window: past `per_address` failures the address is answered 429 (with `Retry-After`) until the oldest
failure leaves the window — its guesses are not even compared. `overall` bounds the failures of all
addresses together, so many addresses cannot guess in parallel either (a person with the right token
then waits too, which is the price of a service under a guessing attack). Memory is bounded: at most
`addresses` addresses are remembered, the least recently failing forgotten first.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

WINDOW_S = 60.0
PER_ADDRESS = 5
OVERALL = 50


class LoginThrottle:
    """Failed logins per address and overall, over the last `window` seconds."""

    def __init__(
        self,
        window: float = WINDOW_S,
        per_address: int = PER_ADDRESS,
        overall: int = OVERALL,
        addresses: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window, self.per_address, self.overall, self.addresses = window, per_address, overall, addresses
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque()

    def wait(self, address: str) -> float:
        """Seconds before `address` may try again; 0 when it may now."""
        now = self.clock()
        self._forget(now)
        waits = [0.0]
        mine = self._failures.get(address)
        if mine is not None and len(mine) >= self.per_address:
            waits.append(mine[len(mine) - self.per_address] + self.window - now)
        if len(self._all) >= self.overall:
            waits.append(self._all[len(self._all) - self.overall] + self.window - now)
        return max(waits)

    def failed(self, address: str) -> None:
        """Count a wrong token from `address`."""
        now = self.clock()
        mine = self._failures.pop(address, None) or deque()
        mine.append(now)
        self._failures[address] = mine  # the most recent last: forgotten last
        self._all.append(now)
        while len(self._failures) > self.addresses:
            self._failures.popitem(last=False)
        self._forget(now)

    def _forget(self, now: float) -> None:
        while self._all and self._all[0] <= now - self.window:
            self._all.popleft()
        while len(self._all) > self.overall:
            self._all.popleft()
        for address in [a for a, times in self._failures.items() if times and times[-1] <= now - self.window]:
            del self._failures[address]
        for times in self._failures.values():
            while times and times[0] <= now - self.window:
                times.popleft()
            while len(times) > self.per_address:
                times.popleft()
