"""The CUDA module with CUDA absent (issue 31), and a CUDA error that poisons the context: no repair in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import daifu
from daifu.core import cuda

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

POISONING = (
    "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API "
    "call, so the stacktrace below might be incorrect.",
    "CUDA error: an illegal memory access was encountered",
    "CUDA error: unspecified launch failure",
    "CUDA error: misaligned address",
)
NOT_POISONING = (
    "CUDA out of memory. Tried to allocate 2.00 GiB",
    "CUDA error: all CUDA-capable devices are busy or unavailable",
    "index 7 is out of bounds: an illegal index",
    "mat1 and mat2 shapes cannot be multiplied (8x5 and 4x1)",
)


@pytest.mark.skipif(torch.cuda.is_available(), reason="these are the answers with CUDA absent")
def test_every_cuda_call_is_an_empty_answer_with_cuda_absent() -> None:
    assert not cuda.initialised()
    assert cuda.device_count() == 0
    assert cuda.rng_states() == []
    cuda.set_rng_states([])
    assert cuda.empty_cache() is False
    assert cuda.free_bytes("cuda:0") == 0
    cuda.synchronize()
    assert not torch.cuda.is_initialized()  # nothing here initialised CUDA


@pytest.mark.parametrize("message", POISONING)
def test_the_errors_that_poison_the_cuda_context_are_recognised(message: str) -> None:
    assert cuda.poisoned(RuntimeError(message)) == f"RuntimeError: {message.splitlines()[0]}"
    assert cuda.poisoned_text(f"AcceleratorError: {message}") is not None


@pytest.mark.parametrize("message", NOT_POISONING)
def test_other_errors_do_not_poison_it(message: str) -> None:
    assert cuda.poisoned(RuntimeError(message)) is None


@pytest.mark.parametrize("case", [str, str.lower, str.upper, str.swapcase, str.title])
def test_every_cuda_error_the_expression_matches_passes_the_word_test_first(case: Any) -> None:
    """The cheap word test in front of the expression turns away no text the expression matches: each of
    its alternatives, in any case and inside a message, and each poisoning message, passes it."""
    alternatives = [part.replace("\\b", "") for part in cuda._CUDA_ERROR.pattern.split("|")]
    assert all(part.replace("_", "").replace(" ", "").isalnum() for part in alternatives)  # literal words
    for text in [f"RuntimeError: x {word} y" for word in alternatives] + [f"RuntimeError: {m}" for m in POISONING]:
        text = case(text)
        assert cuda._CUDA_ERROR.search(text)
        assert cuda._may_name_cuda(text), text
    assert not cuda._may_name_cuda("ConnectionResetError: collective timed out (injected)")


def test_out_of_memory_is_told_by_type_or_by_message() -> None:
    assert cuda.out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB"))
    assert cuda.out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:114] DefaultCPUAllocator: out of memory"))
    assert not cuda.out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


def test_a_poisoned_context_gets_no_repair_in_process_the_exception_goes_on_and_the_host_state_is_rescued(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    daifu.configure(workspace=str(tmp_path / "ws"))
    asked: list[Any] = []

    def policy(crash: daifu.Crash) -> Any:
        asked.append(crash)
        return daifu.Skip()

    daifu.set_policy(policy)
    error = RuntimeError(POISONING[0])

    @daifu.transform
    def train(model: Any) -> None:
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            raise error

    with pytest.raises(RuntimeError) as raised:
        train(torch.nn.Linear(4, 1))
    assert raised.value is error  # unchanged
    assert asked == []  # no decision asked for
    said = capsys.readouterr().err
    assert "not repaired (a CUDA error that leaves the CUDA context unusable: no repair is attempted in this process)" \
        in said
    assert "DaiFu: rescue: model (module)" in said
