"""Redaction by value: secrets of every kind planted in a crash never reach the repair bot or the record."""

from __future__ import annotations

import base64
import dataclasses
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from daifu.cli import main as cli
from daifu.decide.automatic import RECORD_NAME
from daifu.decide.candidates import restored
from daifu.core.decisions import Surgery
from daifu.report.redact import (
    has_placeholder,
    is_secret_key,
    looks_like_environment,
    redact,
    restore_lines,
    scrub,
    secret_values,
)
from daifu.report.summary import summarize
from tests.botfixtures import crash_from, served_scripted_bot

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYCANARYKEY1"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("key sk-proj-CANARYabcdefghijklmnop0123", "key <redacted:openai-key>"),
        ("sk-CANARYabcdefghijklmnopqrstu", "<redacted:openai-key>"),
        ("sk-ant-api03-CANARYabcdefghijklmnop", "<redacted:anthropic-key>"),
        ("push with ghp_CANARYabcdefghijklmnopqrstuvwxyz01", "push with <redacted:github-token>"),
        ("github_pat_11CANARYabcdefghijklmnop_qrstuv", "<redacted:github-token>"),
        ("id AKIACANARY1234567890 here", "id <redacted:aws-access-key-id> here"),
        (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_access_key = <redacted:aws-secret-key>"),
        ("xoxb-123456789012-CANARYabcdef", "<redacted:slack-token>"),
        ("AIzaSyCANARYabcdefghijklmnopqrstuvwxyz1", "<redacted:google-api-key>"),
        ("hf_CANARYabcdefghijklmnopqrstuvwxyz01234", "<redacted:huggingface-token>"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJDQU5BUlkifQ.c2lnbmF0dXJlQ0FOQVJZ", "<redacted:jwt>"),
        ("Authorization: Bearer CANARY.abc-123456", "Authorization: Bearer <redacted:bearer>"),
        ("Authorization: CANARY12345", "Authorization: <redacted:secret>"),
        ("postgresql://user:CANARYpw@db/x", "postgresql://user:<redacted:password>@db/x"),
        ("{'api_key': 'CANARY', 'lr': 0.1}", "{'api_key': '<redacted:secret>', 'lr': 0.1}"),
        ("Config(password='hunter2', epochs=3)", "Config(password='<redacted:secret>', epochs=3)"),
        ("login failed: password=CANARY22 for bob", "login failed: password=<redacted:secret> for bob"),
        ("invalid secret: 9fQx2LmZpR7tWvY3kBnH8sJdCANARY", "invalid secret: <redacted:secret>"),
    ],
)
def test_known_formats_and_contexts_are_redacted_keeping_the_rest(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "token embeddings have shape (4, 16)",
        "max_tokens=512 and num_tokens: 12",
        "key_padding_mask must be bool",
        "Missing key(s) in state_dict: layer4_1_conv2_weight_abcdefgh",
        "pad_token='<pad>' bos_token='<s>'",
        "token = tokens[i]",
        "mat1 and mat2 shapes cannot be multiplied (4x16 and 8x3)",
        "/home/user/runs/exp-1/checkpoints/epoch3.pt",
        "expected scalar type Long but found Float",
    ],
)
def test_ordinary_deep_learning_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_in_code_only_string_literals_count_as_secret_values() -> None:
    source = 'def f(tokens, i):\n    token = tokens[i]\n    api_key = "hunter2"\n    return token\n'
    shown = redact(source, code=True)
    assert "token = tokens[i]" in shown and 'api_key = "<redacted:secret>"' in shown


def test_a_redacted_block_keeps_its_line_count_and_restores() -> None:
    source = (
        "def f(x):\n    pem = '''-----BEGIN PRIVATE KEY-----\nMIIBCANARY\nabc\n-----END PRIVATE KEY-----'''\n"
        "    key = 'sk-proj-CANARYabcdefghijklmnop0123'\n    return x / 0\n"
    )
    shown = redact(source, code=True)
    assert shown.count("\n") == source.count("\n") and "CANARY" not in shown
    surgery = shown.replace("return x / 0", "return x / 1")  # what a bot sends back, from the redacted source
    back = restore_lines(surgery, source)
    assert "key = 'sk-proj-CANARYabcdefghijklmnop0123'" in back and "return x / 1" in back
    assert has_placeholder(back)  # the PEM block spans lines: it cannot be put back line by line


def test_a_surgery_that_keeps_a_placeholder_is_never_valid() -> None:
    def f(x):
        api_key = "sk-proj-CANARYabcdefghijklmnop0123"
        return x / 0, api_key

    crash = crash_from(f, 1)
    kept = restored(Surgery(redact(crash.source, code=True).replace("x / 0", "x / 1")), crash)
    assert isinstance(kept, Surgery) and "sk-proj-CANARY" in kept.source and not has_placeholder(kept.source)
    copied = restored(Surgery(redact(crash.source, code=True).replace("x / 0", "'<redacted:secret>'")), crash)
    assert has_placeholder(copied.source)  # type: ignore[union-attr]


def test_secret_keys_and_environment_copies() -> None:
    assert is_secret_key("api_key") and is_secret_key("Authorization") and is_secret_key("DB_PASSWORD")
    assert is_secret_key("token") and not is_secret_key("tokens") and not is_secret_key("pad_token")
    assert looks_like_environment({"HOME": "/root", "PATH": "/bin", "LANG": "C"})
    assert not looks_like_environment({"lr": 0.1, "epochs": 3, "batch": 8})
    assert not looks_like_environment({"A": 1, "B": 2, "C": 3})  # values are not strings


def test_summaries_redact_dict_entries_by_key_and_environment_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICE_PASSWORD", "CANARYenvironment")
    settings = {"api_key": "plain", "lr": 0.1, "headers": {"Authorization": "CANARYnested"}}
    shown = "dict of length 3: ['api_key': <redacted:secret>, 'lr': 0.1, 'headers': dict of length 1]"
    assert summarize(settings).text == shown
    text = summarize(dict(os.environ)).text + summarize(os.environ).text
    assert "CANARYenvironment" not in text and "<redacted:environment>" in text


# -- the canary: every kind of secret in a real crash, the report as sent, the record and `daifu report` ----

CANARIES = {
    "local_by_name": "sk-proj-CANARYlocalname0123456789abc",
    "bearer_local": "CANARYbearer.0123456789abcdef",
    "url_password": "CANARYurlpw99",
    "dict_api_key": "CANARYdictvalue",
    "nested_password": "CANARYnestedpw",
    "innocent_aws": "AKIACANARY0123456789",
    "aws_secret": AWS_SECRET,
    "github": "ghp_CANARYgithub0123456789abcdefghijkl",
    "slack": "xoxb-1234567890-CANARYslackabc",
    "google": "AIzaSyCANARYgoogle0123456789abcdefghij",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJDQU5BUllqd3QiOjF9.CANARYsignature0123",
    "anthropic": "sk-ant-api03-CANARYanthropic0123456789",
    "huggingface": "hf_CANARYhuggingface0123456789abcdefgh",
    "pem_body": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCANARYpem",
    "message_token": "CANARYmessage0123456789",
    "message_password": "CANARYmsgpw",
    "cause_key": "sk-CANARYcauseabcdefghijklmnopqrst",
    "source_literal": "sk-proj-CANARYsourceliteral0123456789",
    "callee_literal": "CANARYcalleesecret",
    "callee_local": "ghp_CANARYcalleelocal0123456789abcdefgh",
    "env_copy": "CANARYenvcopy-value",
    "env_key": "sk-proj-CANARYenvkey0123456789abcdef",
    "repr_password": "CANARYreprpw",
}


@dataclasses.dataclass
class ServiceConfig:
    host: str
    password: str


def open_session(url, token):
    session_key = "CANARYcalleesecret"  # a literal in a user callee's source
    raise ConnectionError(
        f"cannot reach {url}: token={token} rejected, password: {CANARIES['message_password']}"
    ) from PermissionError(f"key {CANARIES['cause_key']} revoked, session {session_key}")


def service_call(batch):
    api_key = "sk-proj-CANARYlocalname0123456789abc"
    auth_header = "Bearer " + CANARIES["bearer_local"]
    db_url = f"postgresql://user:{CANARIES['url_password']}@db/x"
    settings = {"api_key": CANARIES["dict_api_key"], "db": {"password": CANARIES["nested_password"]}, "lr": 0.1}
    note = f"deploy key {CANARIES['innocent_aws']}"
    aws = f"aws_secret_access_key={CANARIES['aws_secret']}"
    tokens = [CANARIES["github"], CANARIES["slack"], CANARIES["google"], CANARIES["jwt"]]
    others = (CANARIES["anthropic"], CANARIES["huggingface"])
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{CANARIES['pem_body']}\n-----END RSA PRIVATE KEY-----"
    environment = dict(os.environ)
    config = ServiceConfig("db", CANARIES["repr_password"])
    fallback = "sk-proj-CANARYsourceliteral0123456789"  # a literal in the vaccinated function's source
    session = open_session(db_url, CANARIES["message_token"])
    return batch, api_key, auth_header, settings, note, aws, tokens, others, pem, environment, config, fallback, session


def test_no_planted_secret_reaches_the_bot_the_record_or_daifu_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SERVICE_TOKEN", CANARIES["env_copy"])
    monkeypatch.setenv("OPENAI_API_KEY", CANARIES["env_key"])
    with served_scripted_bot() as (bot, url):
        daifu.configure(mode="automatic", approve="never", bot_url=url, workspace=tmp_path / "ws")
        with pytest.raises(ConnectionError):
            daifu.transform(service_call)([1, 2])

    assert len(bot.requests) == 1
    sent = bot.requests[0].decode()
    report = json.loads(sent)["report"]
    record = (tmp_path / "ws" / RECORD_NAME).read_text() + (tmp_path / "ws" / "repairs.jsonl").read_text()
    assert cli.main(["report"]) == 0
    shown = capsys.readouterr().out
    for where, text in (("sent", sent), ("recorded", record), ("daifu report", shown)):
        leaked = [name for name, value in CANARIES.items() if value in text]
        assert leaked == [] and "CANARY" not in text, (where, leaked)

    # what stays readable around the secrets
    assert "postgresql://user:<redacted:password>@db/x" in report["variables"]["db_url"]["text"]
    assert "deploy key <redacted:aws-access-key-id>" in report["variables"]["note"]["text"]
    assert "'lr': 0.1" in report["variables"]["settings"]["text"] and "'db': dict of length 1" in sent
    assert report["variables"]["api_key"]["text"] == "<redacted>"
    assert "cannot reach postgresql://user:<redacted:password>@db/x: token=<redacted" in report["exception"]["message"]
    assert report["exception"]["chain"][0]["type"] == "PermissionError"
    assert 'fallback = "<redacted:openai-key>"' in report["function"]["source"]
    assert report["function"]["source"].count("\n") == inspect.getsource(service_call).count("\n")
    callee = report["frames"][1]
    assert callee["function"] == "open_session" and 'session_key = "<redacted:secret>"' in callee["source"]
    assert set(report["environment"]) == {"python", "platform", "torch", "cuda", "devices", "grad_enabled"}
    assert "The crash report sent to the repair bot" in shown and "<redacted:" in shown


def test_the_working_directory_is_not_a_secret(monkeypatch) -> None:
    monkeypatch.setenv("PWD", "/home/me/project")
    monkeypatch.setenv("OLDPWD", "/home/me")
    assert not is_secret_key("PWD") and not is_secret_key("OLDPWD") and is_secret_key("db_pwd")
    assert redact("/home/me/project/train.py:12") == "/home/me/project/train.py:12"


def test_what_a_trial_printed_is_recorded_redacted(tmp_path: Path) -> None:
    def job(batches):
        token = "sk-proj-CANARYtrialprint0123456789ab"
        total = 0
        for _ in range(3):
            total += batches.read()
            print(f"step done, token {token}")  # the trial's copy prints this too
        return total

    class Flaky:
        reads = 0

        def read(self) -> int:
            self.reads += 1
            if self.reads == 2:
                raise ConnectionResetError("Connection reset by peer")
            return 1

    daifu.configure(mode="automatic", approve="auto", workspace=tmp_path / "ws")
    assert daifu.transform(job)(Flaky()) == 3
    recorded = (tmp_path / "ws" / RECORD_NAME).read_text()
    assert '"output": "' in recorded and "step done, token <redacted:openai-key>" in recorded
    assert "CANARY" not in recorded


def test_a_secret_set_changed_or_removed_between_two_redactions_is_seen_at_once(monkeypatch) -> None:
    from daifu.report.redact import redact

    monkeypatch.setenv("SERVICE_API_KEY", "first-secret-value")
    assert "first-secret-value" not in redact("sent first-secret-value")
    monkeypatch.setenv("SERVICE_API_KEY", "second-secret-value")
    assert redact("sent first-secret-value and second-secret-value") == (
        "sent first-secret-value and <redacted:environment>"
    )
    monkeypatch.delenv("SERVICE_API_KEY")
    assert redact("sent second-secret-value") == "sent second-secret-value"


# -- issue 28.4: a secret known by value is found disguised; what code can fill is sent bounded -------------

KEY = "sk-proj-CANARYdisguised0123456789abcdefXYZ"


def _pieces(secret: str) -> set[str]:
    """Every run of 8 characters of `secret` and of its reverse that mixes letters and digits or cases."""
    runs = {text[i : i + 8] for text in (secret, secret[::-1]) for i in range(len(secret) - 7)}
    return {run for run in runs if sum(any(t(c) for c in run) for t in (str.islower, str.isupper, str.isdigit)) > 1}


def disguises(secret: str) -> dict[str, str]:
    """`secret` as code may store it to carry it out unrecognised."""
    data = secret.encode()
    return {
        "reversed": secret[::-1],
        "hex": data.hex(),
        "HEX reversed": data.hex().upper()[::-1],
        "base64": base64.b64encode(data).decode(),
        "base64 at offset 1": base64.b64encode(b"x" + data).decode(),
        "base64 at offset 2, URL-safe": base64.urlsafe_b64encode(b"xy" + data).decode(),
        "base64 of the reverse": base64.b64encode(secret[::-1].encode()).decode(),
        "base64 reversed": base64.b64encode(data).decode()[::-1],
        "joined with a separator": secret[:17] + " | " + secret[17:],
        "in three pieces": "-".join((secret[:12], secret[12:26], secret[26:])),
    }


@pytest.mark.parametrize("form", list(disguises(KEY)))
def test_an_environment_secret_is_found_disguised(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    text = f"note = {disguises(KEY)[form]!r}, lr=0.1"
    shown = redact(text)
    assert not [piece for piece in _pieces(KEY) if piece in shown], shown
    assert shown.startswith("note = '") and shown.endswith("', lr=0.1") and "<redacted:" in shown


def test_a_crashs_own_secret_is_scrubbed_in_two_halves_in_two_fields() -> None:
    password = "Tr0ub4dor&3-CANARY-horse"
    halves = [f"part a: {password[:12]}", f"part b: {password[12:]}"]
    assert [scrub(half, {password}) for half in halves] == ["part a: <redacted:secret>", "part b: <redacted:secret>"]


@pytest.mark.parametrize(
    "disguised",
    [
        KEY[::-1],
        KEY.encode().hex(),
        base64.b64encode(json.dumps({"k": KEY}).encode()).decode(),
        base64.b64encode(KEY[::-1].encode()).decode(),
        base64.urlsafe_b64encode(KEY.encode()).decode()[::-1],
    ],
    ids=["reversed", "hex", "base64 of JSON holding it", "base64 of the reverse", "base64 reversed"],
)
def test_a_key_of_a_known_shape_is_found_disguised_without_knowing_it(disguised: str) -> None:
    assert redact(f"x = {disguised}") == "x = <redacted:disguised-key>"


@pytest.mark.parametrize(
    "text",
    [
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x1024 and 512x10)",
        "checkpoint_epoch_0003_valloss_0.1234.pt",
        "c2VsZWN0IHRoZSBiZXN0IG1vZGVsIGJ5IHZhbGlkYXRpb24gbG9zcw==",  # base64 of an ordinary sentence
        "d41d8cd98f00b204e9800998ecf8427e",  # an MD5
    ],
)
def test_ordinary_text_and_encodings_without_a_key_are_left_alone(text: str) -> None:
    assert redact(text) == text


def test_a_crashs_value_that_holds_a_key_under_any_name_is_a_secret() -> None:
    found = secret_values([{"config_line": f"model=gpt openai={KEY}"}], [])
    assert KEY in found


@pytest.mark.torch
def test_what_code_can_put_in_an_optimizer_is_sent_bounded_and_says_it_was_cut() -> None:
    torch = pytest.importorskip("torch")
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=0.01)
    for index in range(40):
        optimizer.param_groups[0][f"extra_{index}"] = "x" * 10_000
    summary = summarize(optimizer)
    assert summary.facts["lr"] == 0.01 and summary.facts["betas" if "betas" in summary.facts else "lr"]
    assert "settings of the first param group" in summary.facts["cut"][0]
    assert len(summary.text) <= 300 and all(len(str(v)) <= 200 for v in summary.facts.values())
    assert len(json.dumps(summary.facts)) < 4000


@pytest.mark.torch
def test_a_models_attribute_names_are_sent_bounded() -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential()
    for index in range(80):
        model.add_module(f"layer{index}_" + "x" * 5000, torch.nn.Linear(2, 2))
    facts = summarize(model).facts
    assert len(facts["linears"]) == 50 and all(len(name) <= 200 for name, _, _ in facts["linears"])
    assert "texts over 200 characters" in facts["cut"] and len(json.dumps(facts)) < 20_000


# The acceptance case: admitted code reads the key as a process can (/proc/self/environ, which only holds
# the environment the process started with, so the program runs in its own process), hides it in the
# program's state in every disguise, and the next crash's report, as the repair bot receives it, carries
# none of them.
EXFILTRATING_PROGRAM = '''
import base64, sys
import torch
import daifu

STEAL = """
environ = open("/proc/self/environ", "rb").read().split(b"\\\\0")
key = next(e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"OPENAI_API_KEY="))
group = optimizer.param_groups[0]
group["tag"] = key[::-1]
group["part_a"], group["part_b"] = key[:17], key[17:]
holder.encoded = base64.b64encode(b"x" + key.encode()).decode()
holder.table["hex"] = key.encode().hex()
holder.joined = key[:17] + " | " + key[17:]
"""


class Holder:
    def __init__(self):
        self.table = {}

    def __repr__(self):
        return f"Holder({self.__dict__})"


@daifu.transform
def train(model, optimizer, holder):
    for step in range(4):
        loss = model(torch.ones(1, 2)).sum() * optimizer.param_groups[0]["scale"]
        tag = optimizer.param_groups[0]["tag"]  # KeyError, repaired by the action that steals the key
        optimizer.zero_grad(); loss.backward(); optimizer.step()
        if step == 2:
            raise FloatingPointError("loss diverged")  # the next crash: its report goes to the bot
    return step


daifu.configure(mode="automatic", approve="never", bot_url=sys.argv[1], workspace=sys.argv[2])
daifu.set_policy(lambda crash: daifu.Action(STEAL) if crash.exception_type == "KeyError" else None)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer.param_groups[0]["scale"] = 1.0
train(model, optimizer, Holder())
'''


@pytest.mark.torch
def test_a_key_stolen_from_the_environment_and_hidden_in_the_programs_state_is_not_sent(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    program = tmp_path / "train.py"
    program.write_text(EXFILTRATING_PROGRAM)
    environment = {**os.environ, "OPENAI_API_KEY": KEY, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    with served_scripted_bot() as (bot, url):
        done = subprocess.run(
            [sys.executable, str(program), url, str(tmp_path / "ws")],
            env=environment, capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )
    assert "FloatingPointError: loss diverged" in done.stderr, done.stderr[-3000:]
    assert len(bot.requests) == 1, done.stderr[-3000:]
    sent = bot.requests[0].decode()
    report = json.loads(sent)["report"]
    optimizer, holder = report["variables"]["optimizer"], report["variables"]["holder"]
    assert "'tag': '<redacted:" in optimizer["text"] and optimizer["facts"]["part_a"].startswith("<redacted:")
    assert "Holder({'table': {'hex': '<redacted:" in holder["text"]
    assert [piece for piece in _pieces(KEY) if piece in sent] == []
    assert [name for name, form in disguises(KEY).items() if form in sent] == []
