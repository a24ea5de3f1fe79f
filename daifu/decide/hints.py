"""How a person can change a setting, said the way that fits how they started the program.

Under `daifu run` the script may not import DaiFu at all: what the person can set is the environment
(`DAIFU_MODE=automatic DAIFU_APPROVE=auto daifu run train.py`). A program that imports DaiFu itself
can take either: the environment (a batch job's script, a pipe) first, then the call in code.
"""

from __future__ import annotations

from daifu import config
from daifu.state import RUN


def setting(**values: str) -> str:
    """The way to give `values` (setting name -> value): environment variables under the `daifu` command,
    else those and the `daifu.configure(...)` call."""
    environment = " ".join(f"{config.variable(name)}={value}" for name, value in values.items())
    if RUN.launcher is not None:
        return environment
    call = ", ".join(f'{name}="{value}"' for name, value in values.items())
    return f"{environment} (in the environment) or daifu.configure({call}) (in code)"
