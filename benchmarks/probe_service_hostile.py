"""The hardening issue's reproductions, measured against a real service in a subprocess.

For the code in `--root` (default: this checkout; give an older checkout to compare), it prints:
the time and server CPU a 200 KB exception message costs, and the slowest /healthz answer while it
is analysed; the reply's size for a statement reading 300 float locals (with a short function, and
with one of ~150 KB as in the issue); whether two crashes at one line with different messages get
different answers.

    python benchmarks/probe_service_hostile.py [--root PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_service_load import cpu_seconds, free_port  # noqa: E402
from tests.hostilefixtures import base_report, huge_message_report, many_floats_report  # noqa: E402


def start(root: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "DAIFU_REPAIRBOT_TOKEN"}
    env.update(PYTHONPATH=str(root), DAIFU_REPAIRBOT_BACKEND="rules")
    command = [sys.executable, "-m", "uvicorn", "repairbot.app:app", "--port", str(port), "--log-level", "error"]
    server = subprocess.Popen(command, env=env, cwd=root)
    for _ in range(300):
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("the service did not start")


def huge_message(url: str, pid: int) -> None:
    reply: list[httpx.Response] = []
    body = json.dumps({"report": huge_message_report(200_000)}).encode()
    cpu = cpu_seconds(pid)
    start = time.monotonic()
    sender = threading.Thread(
        target=lambda: reply.append(
            httpx.post(f"{url}/v1/suggest", content=body, headers={"Content-Type": "application/json"}, timeout=120)
        )
    )
    sender.start()
    health: list[float] = []
    while sender.is_alive():
        asked = time.monotonic()
        try:
            httpx.get(f"{url}/healthz", timeout=120)
        except httpx.HTTPError:
            pass
        health.append(time.monotonic() - asked)
        time.sleep(0.05)
    sender.join()
    elapsed = time.monotonic() - start
    print(
        f"200 KB message: HTTP {reply[0].status_code} in {elapsed * 1000:.0f} ms, server CPU "
        f"{(cpu_seconds(pid) - cpu) * 1000:.0f} ms; /healthz asked {len(health)} times meanwhile, "
        f"slowest {max(health, default=0) * 1000:.0f} ms"
    )


def many_floats(url: str, padding: int) -> None:
    body = json.dumps({"report": many_floats_report(300, padding)}).encode()
    start = time.monotonic()
    reply = httpx.post(f"{url}/v1/suggest", content=body, headers={"Content-Type": "application/json"}, timeout=120)
    elapsed = time.monotonic() - start
    count = len(reply.json().get("suggestions", [])) if reply.status_code == 200 else "-"
    print(
        f"300 float locals, request {len(body) / 1024:.0f} KiB: HTTP {reply.status_code}, reply "
        f"{len(reply.content) / 1024:.0f} KiB (x{len(reply.content) / len(body):.1f}), {count} suggestions, "
        f"{elapsed * 1000:.0f} ms"
    )


def same_site(url: str) -> None:
    oom, reset = base_report(), base_report()
    oom["exception"].update(type="RuntimeError", message="CUDA out of memory. Tried to allocate 2.00 GiB")
    reset["exception"].update(type="RuntimeError", message="NCCL communicator was aborted: Connection reset by peer")
    first, second = (httpx.post(f"{url}/v1/suggest", json={"report": r}, timeout=60).json() for r in (oom, reset))
    print(
        f"two crashes at one line: categories {first['diagnosis']['category']} / {second['diagnosis']['category']}, "
        f"second cached: {second['cached']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose repairbot/ is served")
    args = parser.parse_args()
    port = free_port()
    server = start(args.root.resolve(), port)
    url = f"http://127.0.0.1:{port}"
    try:
        print(f"serving {args.root.resolve()}; load average {os.getloadavg()}")
        huge_message(url, server.pid)
        many_floats(url, 0)
        many_floats(url, 2000)
        same_site(url)
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
