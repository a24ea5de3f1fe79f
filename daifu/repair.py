"""Seed-compatible home of `repair_lock`, which serialises console access between processes.

Set `daifu.repair.repair_lock` to a lock shared by the processes (e.g.
`multiprocessing.Manager().Lock()`); deciders that talk to a person hold it while they do.
"""

from __future__ import annotations

import threading
from typing import Any

repair_lock: Any = threading.RLock()
