"""Tensor mismatches: shapes into a Linear layer, broadcasting, dtypes, devices, loss targets."""

from __future__ import annotations

import math
import re
from typing import Any

from repairbot.protocol import Suggestion
from repairbot.rules.context import ReportView, Finding, present, search
from repairbot.rules.edit import parse_def

_MATMUL = r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)"


def linear_input(ctx: ReportView) -> Finding | None:
    """An input of B features into a Linear(C, D): flatten it if that gives C, else rebuild the layer."""
    found = search(_MATMUL, ctx.message)
    if not found:
        return None
    _, b, c, d = (int(x) for x in found.groups())
    suggestions: list[Suggestion | None] = [_flatten(ctx, name, facts, c) for name, facts in ctx.tensors()]
    if not any(suggestions):  # a flatten explains the mismatch; a layer for the wrong size would not
        outer = ctx.outer()  # layers are rebuilt from the training function, where actions run
        suggestions += [_rebuild(outer, expr, b, d) for expr in _layers(outer, c, d)]
        suggestions.append(_new_in_features(ctx, b, c, d))
    return Finding(
        "tensor_mismatch",
        f"A linear layer expecting {c} input features (weight {d}x{c}) got an input whose last dimension is {b}.",
        present(*suggestions),
    )


def _flatten(ctx: ReportView, name: str, facts: dict[str, Any], features: int) -> Suggestion | None:
    shape = facts.get("shape") or []
    if len(shape) > 2 and math.prod(shape[1:]) == features:
        return ctx.wrap(
            name,
            "{}.flatten(1)",
            f"`{name}` has shape {tuple(shape)}; flatten all but the batch "
            f"dimension to get the {features} features the layer expects.",
            0.85,
        )
    return None


def _new_in_features(ctx: ReportView, b: int, c: int, d: int) -> Suggestion | None:
    """Where the function itself builds the layer, build it for B features (rerun from there)."""
    f = ctx.report.function
    pattern = re.compile(rf"(Linear\(\s*(?:in_features\s*=\s*)?){c}(\s*,\s*(?:out_features\s*=\s*)?{d}\b)")
    new = pattern.sub(rf"\g<1>{b}\g<2>", f.source, count=1)
    if new == f.source or parse_def(new) is None:
        return None
    return Suggestion(
        kind="surgery",
        code=new,
        confidence=0.55,
        explanation=f"Build the layer for {b} input features "
        "where this function creates it; resuming there rebuilds it (its weights start untrained).",
    )


def _layers(ctx: ReportView, in_features: int, out_features: int) -> list[str]:
    """Expressions, in the faulty frame, for the live Linear layers with this weight shape."""
    found = []
    for name, variable in ctx.variables.items():
        for path, fan_in, fan_out in variable.facts.get("linears", []):
            if (fan_in, fan_out) == (in_features, out_features):
                found.append(name + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in path.split(".") if p))
    return found


def _rebuild(ctx: ReportView, layer: str, in_features: int, out_features: int) -> Suggestion | None:
    optimizers = [n for n, v in ctx.variables.items() if "lr" in v.facts and "groups" in v.facts]
    lines = [
        "import torch",
        f"{layer} = torch.nn.Linear({in_features}, {out_features})"
        f".to(device={layer}.weight.device, dtype={layer}.weight.dtype)",
    ]
    lines += [f"{opt}.add_param_group({{'params': {layer}.parameters()}})" for opt in optimizers[:1]]
    trained = f", and let `{optimizers[0]}` train it" if optimizers else ""
    return ctx.action(
        "\n".join(lines),
        f"Replace `{layer}` by a fresh Linear({in_features}, {out_features}) that "
        f"accepts the input (its weights start untrained){trained}.",
        0.6,
    )


def broadcast(ctx: ReportView) -> Finding | None:
    """Two operands whose shapes cannot broadcast: drop a trailing 1, or reshape one like the other."""
    found = search(
        r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)",
        ctx.message,
    )
    if not found:
        return None
    tensors = [(n, f.get("shape") or []) for n, f in ctx.tensors()]
    suggestions = []
    for name, shape in tensors:
        for other, other_shape in tensors:
            if name == other:
                continue
            if shape[-1:] == [1] and shape[:-1] == other_shape:
                suggestions.append(
                    ctx.wrap(
                        name,
                        "{}.squeeze(-1)",
                        f"`{name}` has a trailing dimension of 1 that `{other}` lacks; squeeze it.",
                        0.75,
                    )
                )
            elif shape != other_shape and math.prod(shape) == math.prod(other_shape) and shape:
                suggestions.append(
                    ctx.wrap(
                        name,
                        f"{{}}.reshape_as({other})",
                        f"`{name}` {tuple(shape)} and `{other}` "
                        f"{tuple(other_shape)} hold as many elements; give `{name}` the shape of `{other}`.",
                        0.5,
                    )
                )
    return Finding(
        "tensor_mismatch",
        f"Two tensors in an elementwise operation have sizes {found.group(1)} and "
        f"{found.group(2)} at dimension {found.group(3)}, and neither is 1, so they cannot broadcast.",
        present(*suggestions),
    )


_DTYPE = (
    r"expected scalar type (\w+) but found (\w+)|must have the same dtype, but got (\w+) and (\w+)"
    r"|expected m1 and m2 to have the same dtype, but got: (\w+) != (\w+)|Found dtype (\w+) but expected (\w+)"
)
_FLOAT_NAMES = {"double": "float64", "float": "float32", "half": "float16", "bfloat16": "bfloat16"}


def dtype(ctx: ReportView) -> Finding | None:
    """Float64 data (NumPy's default) into a float32 model: convert the odd one out with `.float()`."""
    if not search(_DTYPE, ctx.message):
        return None
    tensors = ctx.tensors()
    doubles = [n for n, f in tensors if f.get("dtype") == "float64"]
    module_dtypes = {v.facts.get("dtype") for v in ctx.variables.values() if "parameters" in v.facts}
    convert = ".double()" if "float64" in module_dtypes and not doubles else ".float()"
    odd = doubles or [n for n, f in tensors if f.get("dtype") not in module_dtypes | {None}]
    suggestions = [
        ctx.wrap(n, "{}" + convert, f"`{n}` is {ctx.facts(n).get('dtype')}; convert it with `{convert}`.", 0.85)
        for n in odd
    ]
    suggestions += [
        ctx.action(f"{n} = {n}{convert}", f"Convert `{n}` with `{convert}`, then rerun the statement.", 0.6)
        for n in odd
    ]
    return Finding(
        "tensor_mismatch",
        "Tensors of different floating-point dtypes met in one operation (often float64 "
        "data from NumPy into a float32 model).",
        present(*suggestions),
    )


_DEVICE = r"Expected all tensors to be on the same device|Tensor on device (\S+) is not on the expected device (\S+?)!"


def device(ctx: ReportView) -> Finding | None:
    """A tensor left on one device while the model is on another: move it with `.to(...)`."""
    if not search(_DEVICE, ctx.message):
        return None
    devices = re.findall(r"\b(cuda:\d+|cuda|cpu|mps|meta|xpu:\d+)\b", ctx.message)
    model_devices = [
        v.facts["device"] for v in ctx.variables.values() if "parameters" in v.facts and "device" in v.facts
    ]
    want = model_devices[0] if model_devices else next((d for d in devices if d != "cpu"), None)
    if want is None:
        return Finding("tensor_mismatch", "Tensors on different devices met in one operation.", [])
    target = "device" if ctx.facts("device") or "device" in ctx.variables else repr(want)
    odd = [n for n, f in ctx.tensors() if f.get("device") != want]
    suggestions = [
        ctx.wrap(n, f"{{}}.to({target})", f"`{n}` is on {ctx.facts(n).get('device')}; move it to {want}.", 0.85)
        for n in odd
    ]
    suggestions += [
        ctx.action(f"{n} = {n}.to({target})", f"Move `{n}` to {want}, then rerun the statement.", 0.6) for n in odd
    ]
    return Finding(
        "tensor_mismatch",
        f"Tensors on different devices ({', '.join(sorted(set(devices)))}) met in one "
        "operation; the model's parameters and its inputs must be on the same device.",
        present(*suggestions),
    )


def loss_target(ctx: ReportView) -> Finding | None:
    """Class-index targets must be int64 and one-dimensional: `.long()`, `.squeeze(1)`."""
    if search(r"expected target dtype to be Long|expected scalar type Long but found", ctx.message):
        fix, why = "{}.long()", "class-index targets must be int64 (`.long()`)"
    elif search(r"1D target tensor expected, multi-target not supported", ctx.message):
        fix, why = "{}.squeeze(1)", "class-index targets must be one-dimensional, shape (N,)"
    else:
        return None
    targets = [n for n, f in ctx.tensors() if _looks_like_target(n, f, fix)]
    suggestions = [ctx.wrap(n, fix, f"`{n}` ({ctx.variables[n].text}): {why}.", 0.85) for n in targets]
    return Finding("tensor_mismatch", f"The loss got targets it cannot use: {why}.", present(*suggestions))


def _looks_like_target(name: str, facts: dict[str, Any], fix: str) -> bool:
    shape = facts.get("shape") or []
    if "squeeze" in fix:
        return len(shape) == 2 and shape[1] == 1
    return not str(facts.get("dtype", "")).startswith("int") and len(shape) <= 1 and not facts.get("requires_grad")


RULES = [linear_input, loss_target, dtype, device, broadcast]
