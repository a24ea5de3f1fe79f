"""API misuse: a float used as a size or index, `.numpy()` on a graph tensor, `view` on a strided tensor."""

from __future__ import annotations

from repairbot.rules.context import ReportView, Finding, present, search
from repairbot.rules.edit import replace_operator, replace_text

_FLOAT_AS_INT = (
    r"'float' object cannot be interpreted as an integer|slice indices must be integers"
    r"|indices must be integers or slices, not float|must be tuple of ints, (but found element of type|not) float"
    r"|valid indices \(got float\)|argument '\w+' .* must be int, not float|must be tuple of ints,\s*but got float"
)


def float_as_int(ctx: ReportView) -> Finding | None:
    """`n / 2` gives a float; sizes, indices and `range` need an int: use `//`, or `int(...)`."""
    if not search(_FLOAT_AS_INT, ctx.message):
        return None
    floats = [n for n in ctx.names if ctx.variables[n].type == "float"]
    suggestions = [ctx.edit(replace_operator("/", "//"), "Use floor division so the size or index is an int.", 0.85)]
    suggestions += [
        ctx.wrap(n, "int({})", f"`{n}` is a float; convert it to int where it is used.", 0.7) for n in floats
    ]
    suggestions += [
        ctx.action(f"{n} = int({n})", f"Make `{n}` an int, then run the statement again.", 0.5) for n in floats
    ]
    return Finding(
        "api_misuse",
        "A float was used where PyTorch or Python needs an integer (a size, an index or a "
        "count); true division `/` always gives a float.",
        present(*suggestions),
    )


def numpy_requires_grad(ctx: ReportView) -> Finding | None:
    """A tensor in the autograd graph cannot become a NumPy array without `.detach()`."""
    if search(r"numpy\(\) on Tensor that requires grad", ctx.message):
        return Finding(
            "api_misuse",
            "`.numpy()` was called on a tensor that requires grad; it must be detached from the autograd graph first.",
            present(
                ctx.edit(
                    replace_text(".numpy()", ".detach().numpy()", unless=".detach().numpy()"),
                    "Detach the tensor before converting it to NumPy.",
                    0.9,
                )
            ),
        )
    if search(r"can't convert \S+ device type tensor to numpy", ctx.message):
        return Finding(
            "api_misuse",
            "`.numpy()` was called on a tensor on an accelerator; copy it to the CPU first.",
            present(
                ctx.edit(
                    replace_text(".numpy()", ".detach().cpu().numpy()", unless=".cpu().numpy()"),
                    "Copy the tensor to the CPU before converting it to NumPy.",
                    0.9,
                )
            ),
        )
    return None


def view_not_contiguous(ctx: ReportView) -> Finding | None:
    """`view` needs compatible strides (after `t()`, `transpose`, `permute`); `reshape` copies when needed."""
    if not search(r"view size is not compatible with input tensor's size and stride", ctx.message):
        return None
    return Finding(
        "api_misuse",
        "`.view()` was called on a non-contiguous tensor (for instance after `.t()`, "
        "`.transpose()` or `.permute()`); its memory layout cannot be viewed in the new shape.",
        present(
            ctx.edit(replace_text(".view(", ".reshape("), "Use `.reshape`, which copies when it must.", 0.85),
            ctx.edit(
                replace_text(".view(", ".contiguous().view(", unless=".contiguous().view("),
                "Make the tensor contiguous before `.view`.",
                0.75,
            ),
        ),
    )


RULES = [float_as_int, numpy_requires_grad, view_not_contiguous]
