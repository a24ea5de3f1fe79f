"""Latency (p50, p99) and throughput of the repair bot's rules backend over HTTP.

N concurrent httpx clients post crash reports to a real server on 127.0.0.1, for at most
`--requests` requests or `--seconds` seconds, whichever comes first. Half the reports are
distinct (the backend computes them), half repeat one (the cache answers), as when many ranks
crash at once.

    python benchmarks/bench_repairbot.py --clients 8 --requests 400 --seconds 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daifu.core.crash import Crash  # noqa: E402
from repairbot.protocol import CrashReport
from daifu.report.build import build_report
from repairbot.server import start_in_thread  # noqa: E402


def sample_report() -> CrashReport:
    """The report of a real crash: a float used as a slice bound."""

    def halves(xs: list[int]) -> list[int]:
        n = len(xs) / 2
        return xs[:n]  # type: ignore[misc]

    try:
        halves([1, 2, 3, 4])
    except TypeError as error:
        code = halves.__code__
        return build_report(
            Crash(
                exception=error,
                function_name="halves",
                qualname="halves",
                source="def halves(xs):\n    n = len(xs) / 2\n    return xs[:n]\n",
                filename=code.co_filename,
                first_lineno=code.co_firstlineno,
                lineno=code.co_firstlineno + 2,
                statement="    return xs[:n]\n",
                kind="statement",
                locals={"xs": [1, 2, 3, 4], "n": 2.0},
                attempt=1,
            )
        )
    raise AssertionError("the sample did not crash")


def bodies(report: CrashReport, count: int) -> list[bytes]:
    """`count` request bodies: even ones distinct (other line numbers), odd ones identical."""
    result = []
    for i in range(count):
        variant = report.model_copy(deep=True)
        if i % 2 == 0:
            variant.function.lineno += 1000 + i
        result.append(('{"report": ' + variant.model_dump_json() + "}").encode())
    return result


def client_loop(url: str, queue: list[bytes], lock: threading.Lock, deadline: float, latencies: list[float]) -> None:
    with httpx.Client(timeout=30, headers={"Content-Type": "application/json"}) as client:
        while time.monotonic() < deadline:
            with lock:
                if not queue:
                    return
                body = queue.pop()
            start = time.perf_counter()
            client.post(f"{url}/v1/suggest", content=body).raise_for_status()
            latencies.append(time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()

    url, stop = start_in_thread("rules")
    queue, lock, latencies = bodies(sample_report(), args.requests), threading.Lock(), []
    start = time.perf_counter()
    deadline = time.monotonic() + args.seconds
    threads = [
        threading.Thread(target=client_loop, args=(url, queue, lock, deadline, latencies)) for _ in range(args.clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    stop()
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    print(
        f"clients={args.clients} requests={len(ordered)} elapsed={elapsed:.2f}s "
        f"throughput={len(ordered) / elapsed:.1f} req/s "
        f"p50={statistics.median(ordered) * 1000:.1f} ms p99={p99 * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
