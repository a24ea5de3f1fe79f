"""Reading `experiment_record.log` the way the prototype's repeated experiments use it.

The prototype (`QAZASDEDC/DaiFu`) ships no parser: its `repeat_experiments.py` scripts only run a
program ten times (`os.system('python main.py')`), and each run leaves a copy of its record,
`experiment_record_<time.time()>.log`, made by `log_program_end` (`daifu/__init__.py`). Restore
times and quality figures were then read off those copies. This module is our own reader for
them, written from the two things the prototype fixes:

- the line format: `logger.add("experiment_record.log")` in the prototype's `daifu/__init__.py`
  uses loguru's default format, `{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} |
  {name}:{function}:{line} - {message}`;
- the messages: `Program Begin` and `Program End[ with Quality Measure <value>]`
  (`daifu/__init__.py`), `Repair <N> Begin`, `Repairing... <Play>`, `Repair <N> End` and
  `Repair Fails` (`RepairManager.repair` and `DaiFuDebugger.do_*` in `daifu/repair.py`).

Any other line is a program's own (`daifu.logger.info(...)` lands in the same file) or one DaiFu
adds; `prototype_view` keeps what the prototype itself would have written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

LINE = re.compile(
    r"^(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}) \| (?P<level>[A-Z]+) *\| (?P<where>.*?) - (?P<message>.*)$"
)
MESSAGES = {
    "begin": re.compile(r"^Program Begin$"),
    "repair_begin": re.compile(r"^Repair (\d+) Begin$"),
    "play": re.compile(r"^Repairing\.\.\. (\w+)$"),
    "repair_end": re.compile(r"^Repair (\d+) End$"),
    "fails": re.compile(r"^Repair Fails$"),
    "end": re.compile(r"^Program End(?: with Quality Measure (.*))?$"),
}
PROTOTYPE_PLAYS = ("Surgery", "Action", "Pass")
"""The plays the prototype writes: `do_surgery`, `do_action`, `do_pass` in its `daifu/repair.py`."""


@dataclass(frozen=True)
class Event:
    """One record line: its kind (a key of `MESSAGES`, or `other`), its argument, where and when."""

    kind: str
    argument: str | None
    time: datetime
    level: str
    where: str

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.kind, self.argument)


class BadRecord(ValueError):
    """A record line that is not in the prototype's line format; the message quotes it."""


def parse(text: str) -> list[Event]:
    """The events of a record, in order; `BadRecord` for a line a line-oriented reader cannot read."""
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        match = LINE.match(line)
        if match is None:
            raise BadRecord(f"line {number} is not a record line: {line!r}")
        message = match["message"]
        kind, argument = "other", message
        for name, pattern in MESSAGES.items():
            found = pattern.match(message)
            if found is not None:
                kind, argument = name, (found.group(1) if found.groups() else None)
                break
        time = datetime.strptime(match["time"], "%Y-%m-%d %H:%M:%S.%f")
        events.append(Event(kind, argument, time, match["level"], match["where"]))
    return events


def parse_file(path: Path) -> list[Event]:
    return parse(path.read_text(encoding="utf-8"))


def is_daifu_note(event: Event) -> bool:
    """A line DaiFu adds that the prototype never writes: a warning from DaiFu's own modules."""
    module = event.where.rsplit("| ", 1)[-1].split(":", 1)[0]  # DaiFu may put `rank N | ` before it
    return event.kind == "other" and event.level != "INFO" and (module == "daifu" or module.startswith("daifu."))


def prototype_view(events: list[Event]) -> list[tuple[str, str | None]]:
    """The record as the prototype would have written it, for the same run.

    Dropped: DaiFu's warnings, and `Repairing... Retry`, a play the prototype never names (for
    `DIRECTLY_RETRY` it writes `Repair N Begin` and `Repair N End` only). A reader pairing
    `Repair N Begin` with `Repair N End` for restore times is unaffected by either.
    """
    kept = []
    for event in events:
        if is_daifu_note(event) or (event.kind == "play" and event.argument not in PROTOTYPE_PLAYS):
            continue
        kept.append(event.key)
    return kept


def restore_seconds(events: list[Event]) -> dict[int, float]:
    """Seconds from `Repair N Begin` to `Repair N End`, by N: what the paper's restore times are."""
    begun: dict[int, datetime] = {}
    spans = {}
    for event in events:
        if event.kind == "repair_begin" and event.argument is not None:
            begun[int(event.argument)] = event.time
        elif event.kind == "repair_end" and event.argument is not None and int(event.argument) in begun:
            spans[int(event.argument)] = (event.time - begun[int(event.argument)]).total_seconds()
    return spans
