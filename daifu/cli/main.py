"""The `daifu` command: run or replay a script with DaiFu, read the record, serve the repair bot.

Exit status: 0 when all went well, 2 for a usage error (a missing script, an unknown function,
a repair number that is not in the record), 1 when a part that is not installed was asked for.
`daifu run` ends as the script does: its `sys.exit` passes through, and an exception it lets through
is printed as `python script.py` prints it, from the script's own frames, with status 1. Output
piped into a reader that stops early (`daifu report 1 | head -2`) ends quietly, with the status a
Unix tool killed by SIGPIPE has (141).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import daifu
from daifu import config, frameworks, targets
from daifu.cli import launch
from daifu.say import say
from daifu.store import credit, repairs
from daifu.store.lines import read_objects
from daifu.report.redact import redact
from daifu.state import RUN

USAGE_ERROR = 2
CLOSED_PIPE = 128 + signal.SIGPIPE
RECORD_HELP = "a repairs.jsonl file or a workspace folder (default: the workspace, every rank)"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `daifu` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        status = handler(args)
        sys.stdout.flush()  # inside the `try`: what is still buffered may meet the closed pipe too
    except BrokenPipeError:
        if args.handler is _run:  # the script's own output: its exception, printed as Python would
            raise
        _silence_stdout()
        return CLOSED_PIPE
    return status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="daifu", description="In-situ crash recovery for deep-learning programs.")
    parser.add_argument("--version", action="version", version=f"daifu {daifu.__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name, text in (
        ("run", "run a script with its entry functions vaccinated (the script is not edited)"),
        ("replay", "run a script again, re-applying the repairs of the last recorded run"),
    ):
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument(
            "--vaccinate",
            action="append",
            default=[],
            metavar="MODULE:QUALNAME",
            help="a function or method to vaccinate before the script runs: of an installed package "
            "(transformers.trainer:Trainer.training_step; a method covers its overrides in subclasses) or of "
            "the script (__main__:MLP.training_step, or just MLP.training_step); repeatable, added to "
            "$DAIFU_VACCINATE (default: the script's main)",
        )
        command.add_argument(
            "--entry", action="append", dest="vaccinate", metavar="NAME",
            help="the same as --vaccinate __main__:NAME (kept for earlier command lines)",
        )
        command.add_argument(
            "--framework",
            action="append",
            default=[],
            choices=sorted(frameworks.PROFILES),
            help="vaccinate the functions a framework's training loop runs: hf (Trainer.training_step, "
            "compute_loss), lightning (every LightningModule's training_step), accelerate (the script's "
            "functions that call .backward); repeatable",
        )
        command.add_argument("script", type=Path, help="the Python script to run")
        command.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
        command.set_defaults(handler=_run, replay=name == "replay")
    show = commands.add_parser("show", help="list the repairs of the record", description="List the recorded repairs.")
    show.add_argument("--record", type=Path, help=RECORD_HELP)
    show.add_argument(
        "--plot",
        type=Path,
        nargs="?",
        const=Path("daifu_run.png"),
        metavar="FILE",
        help="also draw the last run's loss curve (daifu.log_metric) with its repairs, beside what restarts would "
        "have cost (without metrics: its repairs, the losses of the crashed frames and the restore times), to FILE "
        "(default: daifu_run.png); needs matplotlib",
    )
    show.set_defaults(handler=_show)
    report = commands.add_parser(
        "report", help="show one recorded repair in full", description="Show one recorded repair."
    )
    report.add_argument("--record", type=Path, help=RECORD_HELP)
    report.add_argument("number", type=int, nargs="?", help="its number in `daifu show` (default: the last)")
    report.set_defaults(handler=_report)
    rescue = commands.add_parser(
        "rescue", help="list the rescues of runs nothing repaired, or describe one",
        description="List the rescues (the trained state saved when a crash was not repaired, or at a signal).",
    )
    rescue.add_argument("--workspace", type=Path, help="the workspace folder (default: the one in effect)")
    rescue.add_argument("number", type=int, nargs="?", help="its number in the list: describe it and how to load it")
    rescue.set_defaults(handler=_rescue)
    serve = commands.add_parser("serve", help="serve the repair bot over HTTP", description="Serve the repair bot.")
    serve.add_argument("--backend", choices=("rules", "openai"), default="rules", help="who diagnoses (default: rules)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port to listen on (default: 8765)")
    serve.add_argument(
        "--deadline",
        type=float,
        help="most seconds spent on one crash, model call included (default: $DAIFU_BOT_DEADLINE or 45)",
    )
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="listen beyond loopback even without a token (DAIFU_REPAIRBOT_TOKEN); refused otherwise",
    )
    serve.set_defaults(handler=_serve)
    demo = commands.add_parser("demo", help="a short crash-and-repair demonstration", description="Run the demo.")
    demo.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="run in DIR and keep what the run wrote there (default: a temporary folder, removed at the end)",
    )
    demo.set_defaults(handler=_demo)
    return parser


def _run(args: argparse.Namespace) -> int:
    script = Path(args.script).absolute()
    command = "replay" if args.replay else "run"
    if not script.is_file():
        return _usage_error(f"daifu {command}: no such script: {args.script}")
    try:
        named = [targets.parse(text) for text in (*config.settings().vaccinate, *args.vaccinate)]
    except (targets.TargetError, config.ConfigError) as error:
        return _usage_error(f"daifu {command}: {error}")
    in_script = [target.qualname for target in named if target.module == targets.SCRIPT]
    try:
        code, names = launch.vaccinated_code(script, in_script, args.framework)
    except launch.LaunchError as error:
        return _usage_error(f"daifu {command}: {error}")
    if not names and not args.framework and len(in_script) == len(named):
        print(
            f"daifu {command}: {script.name} defines no main(); only what it decorates itself is vaccinated "
            "(--vaccinate NAME names a function)",
            file=sys.stderr,
        )
    if args.replay:
        config.configure(mode="replay")
    in_packages = [target for target in named if target.module != targets.SCRIPT]
    found = [f"{targets.SCRIPT}:{name}" for name in names if name not in in_script and name != launch.DEFAULT_ENTRY]
    RUN.launcher = f"daifu {command}"
    try:
        launch.run_as_main(code, script, args.args,
                           before=lambda: _vaccinate_packages(in_packages, args.framework, found))
    except SystemExit:
        raise
    except BaseException as error:  # what `python script.py` would print: none of this launcher's frames
        shown = launch.script_traceback(error.__traceback__, code)
        # What the interpreter sets for an uncaught exception: the record's `Program End with Exception`
        # (`daifu.store.record`) and post-mortem tools read it.
        sys.last_type, sys.last_value, sys.last_traceback = type(error), error, shown
        sys.excepthook(type(error), error.with_traceback(shown), shown)  # Python prints the exception's own
        return 130 if isinstance(error, KeyboardInterrupt) else 1
    return 0


def _vaccinate_packages(named: Sequence[targets.Target], profiles: Sequence[str], found: Sequence[str]) -> None:
    """Vaccinate the functions of installed packages that were named, or that the profiles name, with
    the script's folder first on `sys.path` as the script will see it; a name that does not resolve
    ends the command as a usage error, before the script runs. `found`: the script's functions the
    profiles found, said with them."""
    try:
        done = [*found, *(name for profile in profiles for name in frameworks.apply(profile))]
        done += [name for target in named for name in targets.vaccinate_target(target)]
    except targets.TargetError as error:
        print(f"daifu run: {error}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR) from None
    if done:
        say(f"vaccinated {', '.join(done)}")


def _show(args: argparse.Namespace) -> int:
    entries = _load(args.record)
    if entries is None:
        return USAGE_ERROR
    _table(entries, _passed_over(entries, args.record))
    return _plot(entries, _folder(args.record), args.plot) if args.plot is not None else 0


def _passed_over(entries: list[dict[str, Any]], path: Path | None) -> list[str]:
    """What each repair passed over (`daifu.core.account`), as last recorded: on its own line, or on
    a later line of what its site's repairs passed over since (by process and repair number)."""
    try:
        if path is not None and not path.is_dir():
            later = [entry for entry in read_objects(path) if entry.get("event") == repairs.PASSED_OVER]
        else:
            later = [entry for entry in repairs.events(path) if entry.get("event") == repairs.PASSED_OVER]
    except (OSError, ValueError):
        later = []
    latest = {(event.get("pid"), event.get("rank"), event.get("repair")): event for event in later}
    texts = []
    for entry in entries:
        found = latest.get((entry.get("pid"), entry.get("rank"), entry.get("repair"))) or entry.get("passed_over")
        texts.append(str(found.get("text", "")) if isinstance(found, dict) else "")
    return texts


def _table(entries: list[dict[str, Any]], passed: list[str] | None = None) -> None:
    if not entries:
        print("No repairs recorded.")
        return
    ranked = any(entry.get("rank") is not None for entry in entries)
    passed = passed if passed is not None and any(passed) else None
    waited = any(isinstance(entry.get("waited_ms"), (int, float)) for entry in entries)
    header: tuple[str, ...] = ("#", "time", "function", "where", "exception", "decision", "decided by",
                               "suggested by", "restore")
    header += ("wait for a person",) if waited else ()
    header += ("passed over",) if passed else ()
    rows = [header + (("rank",) if ranked else ())]
    for index, entry in enumerate(entries, 1):
        rows.append(
            (
                str(index),
                str(entry.get("time", "")).replace("T", " ")[:19],
                str(entry.get("function", "?")),
                f"{Path(str(entry.get('file', '?'))).name}:{entry.get('line', '?')}",
                str(entry.get("exception_type", "?")),
                str(entry.get("decision", "?")),
                *_credit(entry),
                _duration(entry.get("duration_ms")),
            )
            + ((_duration(entry.get("waited_ms")),) if waited else ())
            + ((passed[index - 1] or "-",) if passed else ())
            + ((str(entry.get("rank", "")),) if ranked else ())
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _credit(entry: dict[str, Any]) -> tuple[str, str]:
    """Who decided (a person by the name the approval page gave) and who suggested, old records too."""
    decided_by, suggested_by = credit.read(entry)
    name = entry.get("decided_by_person")
    return (str(name) if decided_by == credit.PERSON and name else decided_by or "-"), suggested_by or "-"


def _plot(entries: list[dict[str, Any]], workspace: Path, path: Path) -> int:
    from daifu.cli import plot

    try:
        written = plot.draw(workspace, entries, path)
    except ImportError as missing:
        return _missing("daifu show --plot", missing, "plot")
    except plot.NothingToPlot as nothing:
        print(f"daifu show --plot: {nothing}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as error:
        print(f"daifu show --plot: cannot read the metrics or write {path}: {error}", file=sys.stderr)
        return 1
    print(f"Figure written to {written.absolute()}")
    return 0


def _report(args: argparse.Namespace) -> int:
    entries = _load(args.record)
    if entries is None:
        return USAGE_ERROR
    number = args.number if args.number is not None else len(entries)
    if not 1 <= number <= len(entries):
        return _usage_error(f"daifu report: no repair {number} in the record ({len(entries)} recorded)")
    entry = entries[number - 1]
    for key, value in entry.items():  # shown redacted: a repair's code may hold the user's own secrets
        if key != "code":
            print(f"{key:>17}: {redact(str(value))}")
    if entry.get("code"):
        print("             code:")
        print("\n".join(f"    {line}" for line in redact(str(entry["code"]), code=True).rstrip("\n").splitlines()))
    answers = _bot_answers(entry, _folder(args.record))
    try:  # the crash report the bot got is read with the repair bot's wire models
        sent = _sent_report(answers)
    except ImportError as missing:
        print(f"\n(The crash report sent to the repair bot is not shown: {missing}; pip install 'daifu[bot]'.)")
        return 0
    if sent is not None:
        print("\nThe crash report sent to the repair bot:\n")
        print(sent)
    calls = [answer for answer in answers if answer.get("transcript")]
    for number, answer in enumerate(calls, 1):
        print()
        print(_call_text(answer, f"answer {number} of {len(calls)}" if len(calls) > 1 else "the answer"))
    return 0


def _rescue(args: argparse.Namespace) -> int:
    from daifu.cli import rescue

    return rescue.main(args.workspace or config.settings().workspace, args.number)


def _folder(record_path: Path | None) -> Path:
    """The workspace a `--record` argument names (the file's folder, or the folder itself)."""
    if record_path is None:
        return config.settings().workspace
    return record_path if record_path.is_dir() else record_path.parent


def _bot_answers(entry: dict[str, Any], folder: Path) -> list[dict[str, Any]]:
    """The repair bot's recorded answers for this very repair (same process, same number), oldest first."""
    from daifu.decide.automatic import RECORD_NAME

    path = folder / RECORD_NAME
    try:
        answers = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return []
    key = (entry.get("pid"), entry.get("repair"))
    return [a for a in answers if isinstance(a, dict) and (a.get("pid"), a.get("repair")) == key]


def _sent_report(answers: list[dict[str, Any]]) -> str | None:
    """The crash report the repair bot received last for this repair, as the console's `report` shows it."""
    from daifu.report.build import render_report_text
    from repairbot.protocol import CrashReport

    for answer in reversed(answers):
        if "report" in answer:
            return render_report_text(CrashReport.model_validate(answer["report"]))
    return None


def _call_text(answer: dict[str, Any], which: str) -> str:
    """A recorded model call, exactly: each message sent, the raw reply, and how the reply was read.

    Shown as recorded, not redacted again: the messages were built from the redacted crash report,
    and rewriting them would no longer show what the model received.
    """
    from repairbot.protocol import Transcript

    call = Transcript.model_validate(answer["transcript"])
    usage = call.usage
    tokens = (
        f", {usage.prompt_tokens} tokens in, {usage.completion_tokens} out"
        if usage is not None and usage.prompt_tokens is not None
        else ""
    )
    lines = [f"The model call behind {which} (model {call.model}{tokens}):"]
    for message in call.messages:
        lines += [f"--- {message.role} ---", message.content.rstrip("\n")]
    if call.reply is None:
        lines.append("--- no reply ---")
    else:
        lines += [f"--- reply (finish_reason: {call.finish_reason or 'not given'}) ---", call.reply.rstrip("\n")]
    if answer.get("answer"):
        lines += ["--- the answer to the question ---", str(answer["answer"])]
    lines.append("--- how the reply was read ---")
    lines += [f"  {note}" for note in call.notes] or ["  (nothing to note)"]
    if call.cut:
        lines.append("(some texts were shortened by the repair bot to fit its answer's bounds)")
    return "\n".join(lines)


def _serve(args: argparse.Namespace) -> int:
    try:  # the server and its dependencies load only for this command
        from repairbot.server import serve
    except ImportError as missing:
        return _missing("the repair bot server", missing, "bot")
    try:
        serve(host=args.host, port=args.port, backend=args.backend, deadline=args.deadline,
              allow_remote=args.allow_remote)
    except ValueError as error:  # not exposed without a token; a backend that cannot work; a bad deadline
        return _usage_error(f"daifu serve: {error}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    try:
        from daifu.cli.demo import main as demo
    except ImportError as missing:
        return _missing("the demo", missing, "bot", "with PyTorch")
    demo(keep=args.keep)
    return 0


def _load(path: Path | None) -> list[dict[str, Any]] | None:
    """The repairs `show` lists and `report` numbers: one file, a folder, or the workspace (every rank)."""
    where = path or config.settings().workspace
    if path is None and not any(where.glob("repairs*.jsonl")):
        print(f"No record at {repairs.repairs_path()}.", file=sys.stderr)
        return []
    try:
        return repairs.records_in(path)
    except FileNotFoundError:
        print(f"No record at {where}.", file=sys.stderr)
        return []
    except (OSError, ValueError) as error:
        print(f"daifu: cannot read the record {where}: {error}", file=sys.stderr)
        return None


def _duration(milliseconds: Any) -> str:
    if not isinstance(milliseconds, (int, float)):
        return "-"
    return f"{milliseconds:.0f} ms" if milliseconds < 10_000 else f"{milliseconds / 1000:.1f} s"


def _silence_stdout() -> None:
    """Point standard output at the null device, so that flushing it at exit meets no closed pipe again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind it (a test's capture): nothing flushes there
        pass


def _usage_error(message: str) -> int:
    print(message, file=sys.stderr)
    return USAGE_ERROR


def _missing(what: str, error: ImportError, extra: str, beside: str = "") -> int:
    print(
        f"daifu: {what} is not available in this installation: {error}. "
        f"Install it with: pip install 'daifu[{extra}]'{' ' + beside if beside else ''}",
        file=sys.stderr,
    )
    return 1
