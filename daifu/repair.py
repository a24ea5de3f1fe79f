"""`repair_lock`, which serialises a person's prompts between processes, under the prototype's module name.

The module holds only this lock: programs written for the prototype set `daifu.repair.repair_lock`
to a lock shared by their processes (e.g. `multiprocessing.Manager().Lock()`), so its name is their
API. The console and the approval prompt (`daifu.console`) hold it while they talk to the person.
"""

from __future__ import annotations

import threading
from typing import Any

repair_lock: Any = threading.RLock()
