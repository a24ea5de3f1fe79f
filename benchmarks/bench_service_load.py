"""The repair bot under load: 8, 32 and 64 concurrent clients, each request a distinct report.

The real service runs in a subprocess (`uvicorn repairbot.app:app`, rules backend, on a free
loopback port); asyncio clients in this process post crash reports that all differ (no answer
comes from the cache), for a bounded number of requests and at most `--seconds` per level. For
each level: throughput, p50 and p99 latency, errors (any status but 200, or a transport error),
the server's RSS before and after (VmRSS from /proc/<pid>/status), and the latency of /healthz
polled during the load; at the end, the RSS once the answer cache has expired. The issue's target:
at 32 clients on a 2-core machine, p99 <= 10x p50, no error, RSS back near its baseline.

    python benchmarks/bench_service_load.py [--requests-per-client 25] [--seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from daifu.core.crash import Crash  # noqa: E402
from daifu.report.build import build_report  # noqa: E402
from repairbot.protocol import CrashReport  # noqa: E402

SOURCE = """def train(model, loader, optimizer, epochs, log_every):
    history = []
    for epoch in range(epochs):
        total = 0.0
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            out = model(x)
            loss = ((out - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            total += loss.item()
            if step % log_every == 0:
                history.append(total / (step + 1))
        half = len(history) / 2
        recent = history[half:]
        print(epoch, sum(recent) / max(1, len(recent)))
    return history
"""


def sample_report() -> CrashReport:
    """The report of a real crash in a training-shaped function: a float used as a slice bound."""
    history = [0.5, 0.4, 0.3, 0.25]
    half = len(history) / 2
    try:
        history[half:]  # type: ignore[index]
    except TypeError as error:
        return build_report(
            Crash(
                exception=error,
                function_name="train",
                qualname="train",
                source=SOURCE,
                filename=str(ROOT / "examples" / "train.py"),
                first_lineno=10,
                lineno=24,
                statement="        recent = history[half:]\n",
                kind="statement",
                locals={"history": history, "half": half, "epoch": 3, "total": 1.25, "step": 7, "log_every": 2},
                attempt=1,
            )
        )
    raise AssertionError("the sample did not crash")


def distinct_bodies(report: CrashReport, count: int, level: int) -> list[bytes]:
    """`count` request bodies that differ in their message (the cache key is the whole request)."""
    base = report.model_dump_json()
    message = report.exception.message
    return [
        ('{"report": ' + base.replace(message, f"{message} [level {level}, request {i}]", 1) + "}").encode()
        for i in range(count)
    ]


def rss_kib(pid: int) -> tuple[int, int]:
    """The process's resident set now and at its peak (VmRSS, VmHWM), in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def cpu_seconds(pid: int) -> float:
    """CPU time the process has used (user and system), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "DAIFU_REPAIRBOT_TOKEN"}
    env.update(PYTHONPATH=str(ROOT), DAIFU_REPAIRBOT_BACKEND="rules")
    command = [sys.executable, "-m", "uvicorn", "repairbot.app:app", "--port", str(port), "--log-level", "warning"]
    server = subprocess.Popen(command, env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("the service did not start within 60 s")


async def run_level(url: str, bodies: list[bytes], clients: int, seconds: float) -> dict[str, float]:
    """Post `bodies` from `clients` concurrent clients, polling /healthz meanwhile.

    Each client has its own connection, opened (and its TLS settings loaded, which costs tens of
    milliseconds of CPU in httpx) before the clock starts: the clients are long-lived, as a job's
    ranks would be, and the first request of each should not stand for the service's tail.
    """
    queue = list(reversed(bodies))
    latencies: list[float] = []
    errors: list[str] = []
    health: list[float] = []
    deadline = time.monotonic() + seconds
    headers = {"Content-Type": "application/json"}
    pool = [httpx.AsyncClient(timeout=60, headers=headers) for _ in range(clients + 1)]
    await asyncio.gather(*(client.get(f"{url}/healthz") for client in pool))

    async def one_client(client: httpx.AsyncClient) -> None:
        while queue and time.monotonic() < deadline:
            body = queue.pop()
            start = time.perf_counter()
            try:
                reply = await client.post(f"{url}/v1/suggest", content=body)
                if reply.status_code != 200:
                    errors.append(f"HTTP {reply.status_code}")
            except httpx.HTTPError as error:
                errors.append(type(error).__name__)
            latencies.append(time.perf_counter() - start)

    async def poll_health(client: httpx.AsyncClient, done: asyncio.Event) -> None:
        while not done.is_set():
            start = time.perf_counter()
            await client.get(f"{url}/healthz")
            health.append(time.perf_counter() - start)
            await asyncio.sleep(0.1)

    done = asyncio.Event()
    poller = asyncio.create_task(poll_health(pool[-1], done))
    start = time.perf_counter()
    await asyncio.gather(*(one_client(client) for client in pool[:-1]))
    elapsed = time.perf_counter() - start
    done.set()
    await poller
    for client in pool:
        await client.aclose()
    ordered = sorted(latencies)
    return {
        "requests": len(ordered),
        "errors": len(errors),
        "elapsed": elapsed,
        "throughput": len(ordered) / elapsed,
        "p50": statistics.median(ordered),
        "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "health_max": max(health) if health else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--requests-per-client", type=int, default=25)
    parser.add_argument("--seconds", type=float, default=60.0, help="at most this long per level")
    parser.add_argument("--settle", type=float, default=31.0, help="seconds to wait for the cache to expire")
    args = parser.parse_args()

    port = free_port()
    server = start_server(port)
    url = f"http://127.0.0.1:{port}"
    report = sample_report()
    try:
        asyncio.run(run_level(url, distinct_bodies(report, 50, 0), 4, 30))  # warm-up: imports, first allocations
        baseline, _ = rss_kib(server.pid)
        print(f"server pid {server.pid}, RSS after warm-up {baseline / 1024:.1f} MiB; load average {os.getloadavg()}")
        for level in args.levels:
            bodies = distinct_bodies(report, level * args.requests_per_client, level)
            before, _ = rss_kib(server.pid)
            cpu = cpu_seconds(server.pid)
            result = asyncio.run(run_level(url, bodies, level, args.seconds))
            cpu = cpu_seconds(server.pid) - cpu
            after, peak = rss_kib(server.pid)
            print(
                f"clients={level:3d} requests={result['requests']:5.0f} errors={result['errors']:.0f} "
                f"throughput={result['throughput']:6.1f} req/s p50={result['p50'] * 1000:7.1f} ms "
                f"p99={result['p99'] * 1000:7.1f} ms p99/p50={result['p99'] / result['p50']:4.1f} "
                f"healthz max={result['health_max'] * 1000:6.1f} ms "
                f"server CPU {cpu / result['requests'] * 1000:.1f} ms/request "
                f"RSS {before / 1024:.1f} -> {after / 1024:.1f} MiB (peak {peak / 1024:.1f})"
            )
        at_end, peak = rss_kib(server.pid)
        print(f"RSS after the load {at_end / 1024:.1f} MiB (baseline {baseline / 1024:.1f}, peak {peak / 1024:.1f})")
        time.sleep(args.settle)  # the cache's answers expire (30 s), and go at the next request
        asyncio.run(run_level(url, distinct_bodies(report, 1, -1), 1, 30))
        final, _ = rss_kib(server.pid)
        print(
            f"RSS {args.settle:.0f} s later, after one more request: {final / 1024:.1f} MiB "
            f"(baseline {baseline / 1024:.1f}, {(final - baseline) / 1024:+.1f} MiB); load average {os.getloadavg()}"
        )
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
