"""DaiFu: in-situ crash recovery for deep-learning programs.

Vaccinate a training function with `@daifu.transform`; when one of its statements raises, the
crash is caught where it happens, with every live value kept, a decision is taken (by a policy,
the console or the repair bot), and execution resumes at the faulty statement.
"""

from daifu import repair
from daifu.config import TRANSFORM_REGISTRY, configure, set_policy, settings
from daifu.core.crash import Crash
from daifu.core.decisions import Action, Raise, Retry, Skip, Surgery
from daifu.store.record import log_program_end
from daifu.core.transform import transform

__all__ = [
    "Action",
    "Crash",
    "Raise",
    "Retry",
    "Skip",
    "Surgery",
    "TRANSFORM_REGISTRY",
    "configure",
    "log_program_end",
    "repair",
    "set_policy",
    "settings",
    "transform",
]
