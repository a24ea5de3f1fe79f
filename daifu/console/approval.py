"""The approval prompt of automatic mode (`approve="ask"`): a person applies, edits or rejects the repair
bot's suggestions (`daifu.console.prompt`), one process at a time; `q` opens the `(DaiFu)` console.

This is how the person at the terminal approves (`daifu.decide.contract.Person.approve`): the prompt
only returns a decision; the runtime carries it out.
"""

from __future__ import annotations

from collections.abc import Sequence

from daifu import repair
from daifu.console import session
from daifu.console.prompt import Prompt, Suggestion, ToConsole
from daifu.core.crash import Crash
from daifu.core.decisions import Decision
from daifu.core.handling import RepairContext
from daifu.decide.verify import Verification


def approve(crash: Crash, context: RepairContext, diagnosis: str, suggestions: Sequence[Suggestion]) -> Decision | None:
    """Ask the person at the terminal what to do with the bot's `suggestions` for `crash`.

    Returns the decision taken; `None` (raise) when every suggestion was rejected or input ended.
    `q` opens the `(DaiFu)` console, whose decision is returned.
    """
    with repair.repair_lock:
        choice = Prompt(Verification(crash, context.settings), list(suggestions)).run(diagnosis)
    if not isinstance(choice, ToConsole):
        return choice
    return session.open_console(crash, context)  # after the lock is released: a Manager lock is not re-entrant
