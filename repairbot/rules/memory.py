"""Out of memory: this program's batch is too big, or another process holds the device."""

from __future__ import annotations

import ast

from repairbot.protocol import Suggestion
from repairbot.rules.context import ReportView, Finding, present, retry, search
from repairbot.rules.edit import parse_def
from repairbot.signs import BUSY, OOM, others_hold_more, wait_code

_BATCH_NAMES = ("batch_size", "bs", "micro_batch_size")
MAX_WAIT_S = 60
"""The longest wait proposed: the client applies waits of at most a minute without a person
(`daifu.decide.allowlist.MAX_SLEEP_S`); a device held longer is waited for by further retries."""


def device_busy(ctx: ReportView) -> Finding | None:
    """Memory held by another process comes back when it ends: wait with growing delays, then retry."""
    if not search(BUSY, ctx.message) and not others_hold_more(ctx.message):
        return None
    delay = min(MAX_WAIT_S, 10 * 2 ** ctx.tried_count())
    return Finding(
        "out_of_memory",
        "The device is busy or its memory is held by another process; this program's own use is not the cause.",
        present(
            ctx.outer().action(
                wait_code(delay), f"Wait {delay} s for the other process to release the device, then retry.", 0.75
            ),
            retry("Run the statement again now.", 0.4),
        ),
    )


def out_of_memory(ctx: ReportView) -> Finding | None:
    """Halve the batch (the batches still to come, the loader, the tensors of this one), free the cache, retry."""
    if "OutOfMemoryError" not in ctx.exception_types and not search(OOM, ctx.message):
        return None
    ctx = ctx.outer()  # the loader and the batch live in the training loop
    cuda = search(r"cuda|gpu", ctx.message) is not None or any(
        str(v.facts.get("device", "")).startswith("cuda") for v in ctx.variables.values()
    )
    lines = _halve_loader(ctx) or _halve_batch_size(ctx)
    if not lines:
        return Finding(
            "out_of_memory",
            "The device ran out of memory, and no data loader or batch-size variable is live here to make smaller.",
            present(_empty_cache_and_retry(cuda)),
        )
    lines += _halve_batch(ctx)
    if cuda:
        lines += ["torch.cuda.empty_cache()"]
    lines += ["del _daifu_half"]  # a helper name the action made; it must not become a global
    return Finding(
        "out_of_memory",
        "The device ran out of memory for this batch: the activations of a smaller batch fit.",
        present(
            ctx.action(
                "\n".join(lines),
                "Halve the batch size (the batches still to come, this epoch's "
                "and, through a rebuilt data loader, later ones'; the current batch keeps its first "
                "half)" + (" and free cached GPU memory" if cuda else "") + ", then rerun the statement.",
                0.8,
            ),
            _empty_cache_and_retry(cuda),
        ),
    )


def _halve_loader(ctx: ReportView) -> list[str]:
    loaders = [n for n, v in ctx.variables.items() if v.type == "DataLoader" and (v.facts.get("batch_size") or 0) > 1]
    if not loaders:
        return []
    name = loaders[0]
    return [
        "import torch",
        f"_daifu_half = max(1, {name}.batch_size // 2)",
        # The running epoch goes on with the iterator it has: its batch sampler reads its batch size
        # before each batch, so halving it there halves the batches still to come this epoch.
        f"if isinstance({name}.batch_sampler, torch.utils.data.BatchSampler) and not {name}.drop_last:",
        f"    {name}.batch_sampler.batch_size = _daifu_half",
        f"{name} = torch.utils.data.DataLoader({name}.dataset, batch_size=_daifu_half, "
        f"shuffle=isinstance({name}.sampler, torch.utils.data.RandomSampler), num_workers={name}.num_workers, "
        f"collate_fn={name}.collate_fn, pin_memory={name}.pin_memory, drop_last={name}.drop_last)",
    ]


def _halve_batch_size(ctx: ReportView) -> list[str]:
    names = [n for n in _BATCH_NAMES if isinstance(ctx.facts(n).get("value"), int) and ctx.facts(n)["value"] > 1]
    if not names:
        return []
    return ["import torch", f"_daifu_half = max(1, {names[0]} // 2)", f"{names[0]} = _daifu_half"]


def _halve_batch(ctx: ReportView) -> list[str]:
    """Cut the tensors of the current batch, so that rerunning the statement needs less memory.

    The batch is what the statement uses and what the enclosing `for` loops bound (inputs and
    targets alike: cutting only the inputs would crash the loss on mismatched sizes).
    """
    sizes = {v.facts.get("batch_size") for v in ctx.variables.values() if v.type == "DataLoader"}
    sizes |= {ctx.facts(n).get("value") for n in _BATCH_NAMES}
    names = list(dict.fromkeys(ctx.names + sorted(_loop_targets(ctx))))
    batch = [
        n
        for n in names
        if ctx.variables[n].type == "Tensor"
        and not ctx.facts(n).get("requires_grad")
        and (ctx.facts(n).get("shape") or [None])[0] in sizes - {None}
    ]
    return [f"{n} = {n}[:_daifu_half]" for n in batch]


def _loop_targets(ctx: ReportView) -> set[str]:
    """The variables bound by the targets of the `for` loops whose body holds the faulty statement."""
    f = ctx.report.function
    tree = parse_def(f.source)
    if tree is None:
        return set()
    line = f.lineno - f.first_lineno + 1
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.For, ast.AsyncFor)):
            continue
        if node.body[0].lineno <= line <= (node.end_lineno or node.lineno):
            found |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return {n for n in found if n in ctx.variables}


def _empty_cache_and_retry(cuda: bool) -> Suggestion:
    if cuda:
        return Suggestion(
            kind="action",
            code="import torch\ntorch.cuda.empty_cache()",
            explanation="Free cached GPU memory, then retry.",
            confidence=0.4,
        )
    return retry("Run the statement again unchanged.", 0.3)


RULES = [device_busy, out_of_memory]
