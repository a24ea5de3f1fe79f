"""Telling people that a repair waits: a Slack-compatible webhook (`DAIFU_NOTIFY_URL`).

When a crashed process starts waiting for a decision, the service posts `{"text": ...}` to the
webhook — Slack's incoming webhooks, Mattermost and Rocket.Chat read that shape — with the job, the
exception, where it happened and the link to the repair's page. The text holds no exception
message and no code: a chat channel is a wider audience than the approval page. The post runs in
the background, with a short timeout; a failure is logged and costs nothing else.
"""

from __future__ import annotations

import asyncio

import httpx
from loguru import logger

from repairbot.protocol import PendingRepairRequest

TIMEOUT_S = 5.0
_running: set[asyncio.Task[None]] = set()


def message(request: PendingRepairRequest, url: str) -> str:
    """The notification's text."""
    job, function = request.job, request.report.function
    where = f"{function.filename.rsplit('/', 1)[-1]}:{function.lineno}"
    rank = f", rank {job.rank}" if job.rank is not None else ""
    minutes = request.deadline_s / 60
    return (
        f"DaiFu: {job.name} ({job.host}{rank}, pid {job.pid}) crashed with {request.report.exception.type} at "
        f"{where} in {function.qualname} and waits for a decision: {url} "
        f"(for {minutes:.0f} min, then {request.fallback})"
    )


def post_in_background(webhook: str, text: str) -> None:
    """Post `{"text": text}` to `webhook` without holding up the caller (needs a running event loop)."""
    task = asyncio.get_running_loop().create_task(post(webhook, text))
    _running.add(task)  # kept until done: the loop holds tasks only weakly
    task.add_done_callback(_running.discard)


async def post(webhook: str, text: str) -> None:
    """Post `{"text": text}` to `webhook`; a failure is logged, never raised."""
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            reply = await client.post(webhook, json={"text": text})
        if reply.status_code >= 400:
            logger.warning("The notification webhook answered HTTP {}", reply.status_code)
    except httpx.HTTPError as error:
        logger.warning("The notification webhook could not be reached: {}", error or type(error).__name__)
