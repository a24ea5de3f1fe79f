"""A crash at a `for` header over a DataLoader: the batch that failed to load is loaded again.

One sample of a map-style dataset cannot be collated with the others, so the DataLoader raises
while the loop asks it for the batch holding it. A repair that fixes the dataset then resumes at the
header: the loop must train on that same batch, then on the batches after it, as a run on the fixed
dataset does (`daifu.core.refetch`). Where DaiFu cannot load it again (worker processes, an iterator
it does not know), the loop goes on with the next item as before, and the terminal says why.
"""

# ruff: noqa: E402
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import daifu
from daifu.core import trial

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
DataLoader = torch.utils.data.DataLoader
Dataset = torch.utils.data.Dataset

BAD = 7
"""The sample that cannot be collated: one element wider than the others."""


class Rows(Dataset):
    """Twelve rows of three features; row `bad` is one wider until `fixed` is set."""

    def __init__(self, bad: int | None = BAD) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(12, 3, generator=generator), torch.randn(12, 1, generator=generator)
        self.bad, self.fixed = bad, False

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i == self.bad and not self.fixed:
            return torch.cat([self.x[i], torch.zeros(1)]), self.y[i]
        return self.x[i], self.y[i]


class Tiles(Dataset):
    """Six 2x2 tiles; tile 4 came from another scanner and is 2x3 (its last column is margin)."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(5)
        self.tiles = [torch.randn(2, 3 if i == 4 else 2, generator=generator) for i in range(6)]
        self.labels = torch.randn(6, 1, generator=generator)

    def __len__(self) -> int:
        return len(self.tiles)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tiles[i], self.labels[i]


CROPPED = """def __getitem__(self, i):
    return self.tiles[i][:, :2], self.labels[i]
"""


def train_tiles(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: Any) -> int:
    steps = 0
    for tiles, labels in loader:
        step(model, optimizer, tiles.flatten(1), labels)
        steps += 1
    return steps


def loader_of(dataset: Dataset, batch_size: int = 3, **options: Any) -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator, **options)


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: Any) -> list[Any]:
    steps = []
    for epoch in range(2):
        for x, y in loader:
            step(model, optimizer, x, y)
            steps.append(epoch)
    return steps


def train_enumerated(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: Any) -> list[Any]:
    steps = []
    for epoch in range(2):
        for i, (x, y) in enumerate(loader):
            step(model, optimizer, x, y)
            steps.append((epoch, i))
    return steps


def train_zipped_first(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: Any) -> list[Any]:
    steps = []
    for epoch in range(2):
        for (x, y), i in zip(loader, range(100)):
            step(model, optimizer, x, y)
            steps.append((epoch, i))
    return steps


def train_zipped_second(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: Any) -> list[Any]:
    steps = []
    for epoch in range(2):
        for i, (x, y) in zip(range(100), loader):
            step(model, optimizer, x, y)
            steps.append((epoch, i))
    return steps


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(3)
    model = torch.nn.Linear(3, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def fixed_run(program: Callable[..., list[Any]], **options: Any) -> tuple[torch.nn.Module, list[Any]]:
    """The program on a dataset with no bad sample, not vaccinated: what a repaired run must equal."""
    model, optimizer = model_and_optimizer()
    return model, program(model, optimizer, loader_of(Rows(bad=None), **options))


def repaired_run(program: Callable[..., list[Any]], decision: daifu.Decision, **options: Any
                 ) -> tuple[torch.nn.Module, list[Any], list[daifu.Crash]]:
    """The program on the bad dataset, vaccinated, each crash answered by `decision`."""
    seen: list[daifu.Crash] = []

    def policy(crash: daifu.Crash) -> daifu.Decision:
        seen.append(crash)
        return decision

    daifu.set_policy(policy)
    model, optimizer = model_and_optimizer()
    steps = daifu.transform(program)(model, optimizer, loader_of(Rows(), **options))
    return model, steps, seen


FIX = daifu.Action("loader.dataset.fixed = True")


def same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true but no accelerator")  # a CPU build
@pytest.mark.parametrize("pin_memory", [False, True], ids=["unpinned", "pinned"])
def test_a_fix_at_the_header_trains_on_the_batch_that_failed(pin_memory: bool, capfd: pytest.CaptureFixture[str]
                                                             ) -> None:
    model, steps, seen = repaired_run(train, FIX, pin_memory=pin_memory)
    fixed, fixed_steps = fixed_run(train, pin_memory=pin_memory)
    assert [crash.kind for crash in seen] == ["for"]
    assert steps == fixed_steps == [0] * 4 + [1] * 4  # every batch of both epochs, none lost
    assert same_parameters(model, fixed)
    err = capfd.readouterr().err
    assert "passed over" not in err and "loaded again" in err


@pytest.fixture
def tiles_put_back() -> Iterator[None]:
    """`Tiles.__getitem__` as written again after the test: a patch changes its code in place."""
    code = Tiles.__getitem__.__code__
    yield
    Tiles.__getitem__.__code__ = code


def test_a_patch_of_the_datasets_getitem_trains_on_every_batch(tiles_put_back: None) -> None:
    torch.manual_seed(3)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    daifu.set_policy(lambda crash: daifu.Patch(f"{__name__}:Tiles.__getitem__", CROPPED))
    steps = daifu.transform(train_tiles)(model, optimizer, loader_of(Tiles(), batch_size=2))
    cropped = Tiles()
    cropped.tiles = [tile[:, :2] for tile in cropped.tiles]  # the odd tile cropped before the run
    torch.manual_seed(3)
    fixed = torch.nn.Linear(4, 1)
    assert steps == train_tiles(fixed, torch.optim.SGD(fixed.parameters(), lr=0.1), loader_of(cropped, batch_size=2))
    assert steps == 3 and same_parameters(model, fixed)


def test_retry_loads_the_same_batch_again_until_it_loads() -> None:
    answers = iter([daifu.Retry(), FIX])  # the retry fails again on the same batch; the fix then loads it
    seen: list[daifu.Crash] = []

    def policy(crash: daifu.Crash) -> daifu.Decision:
        seen.append(crash)
        return next(answers)

    daifu.set_policy(policy)
    model, optimizer = model_and_optimizer()
    steps = daifu.transform(train)(model, optimizer, loader_of(Rows()))
    fixed, fixed_steps = fixed_run(train)
    assert [crash.attempt for crash in seen] == [1, 2]  # the same batch failed again: no progress was made
    assert steps == fixed_steps and same_parameters(model, fixed)


@pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}")
@pytest.mark.parametrize("in_process_up_to", [None, 1 << 30], ids=["fork", "in-process"])
def test_a_trial_of_the_fix_gives_the_batch_back_in_the_copy_only(in_process_up_to: int | None) -> None:
    verdicts = []

    def policy(crash: daifu.Crash) -> daifu.Decision:
        verdicts.append(crash.trial(FIX, horizon=1, in_process_up_to=in_process_up_to))
        return FIX

    daifu.set_policy(policy)
    model, optimizer = model_and_optimizer()
    steps = daifu.transform(train)(model, optimizer, loader_of(Rows()))
    fixed, fixed_steps = fixed_run(train)
    assert verdicts[0].passed, verdicts[0].describe()
    assert steps == fixed_steps and same_parameters(model, fixed)  # the live loader gives the batch back once


def test_enumerate_keeps_its_index() -> None:
    model, steps, _ = repaired_run(train_enumerated, FIX)
    fixed, fixed_steps = fixed_run(train_enumerated)
    assert steps == fixed_steps == [(0, i) for i in range(4)] + [(1, i) for i in range(4)]
    assert same_parameters(model, fixed)


def test_zip_with_the_loader_first_stays_in_step() -> None:
    model, steps, _ = repaired_run(train_zipped_first, FIX)
    fixed, fixed_steps = fixed_run(train_zipped_first)
    assert steps == fixed_steps and same_parameters(model, fixed)


def test_zip_that_took_an_item_before_the_loader_goes_on_as_before_and_says_so(
        capfd: pytest.CaptureFixture[str]) -> None:
    model, steps, _ = repaired_run(train_zipped_second, FIX)
    assert len(steps) == 7  # the batch that failed and the range's item taken beside it are passed over
    err = capfd.readouterr().err
    assert "not loaded again" in err and "through a zip" in err


def test_skip_iteration_at_the_header_passes_over_the_batch_and_goes_on_with_the_next(
        capfd: pytest.CaptureFixture[str]) -> None:
    fixes = iter([daifu.SkipIteration(), FIX])
    daifu.set_policy(lambda crash: next(fixes))
    model, optimizer = model_and_optimizer()
    steps = daifu.transform(train_enumerated)(model, optimizer, loader_of(Rows()))
    # the second batch of the first epoch holds sample 7: passed over, and enumerate counts the others
    assert steps == [(0, i) for i in range(3)] + [(1, i) for i in range(4)]
    assert "passed over 3 samples in 1 step" in capfd.readouterr().err


def test_worker_processes_keep_todays_behaviour_and_say_why(capfd: pytest.CaptureFixture[str]) -> None:
    # one batch ahead per worker: the sampler still has indices to give when the batch fails, so the
    # loop can go on (with every index sent to the workers, the retry is refused: `finished_generator`)
    model, steps, seen = repaired_run(train, daifu.Retry(), num_workers=2, prefetch_factor=1)
    assert [crash.kind for crash in seen] == ["for", "for"]  # the workers never see a fix: once per epoch
    assert steps == [0] * 3 + [1] * 3  # each epoch's batch that failed is passed over, as before
    err = capfd.readouterr().err
    assert err.count("not loaded again") == 2 and "worker processes" in err


def test_another_iterator_keeps_todays_behaviour_and_says_why(capfd: pytest.CaptureFixture[str]) -> None:
    class Batches:
        def __init__(self) -> None:
            self.served = 0

        def __iter__(self) -> Batches:
            return self

        def __next__(self) -> int:
            self.served += 1
            if self.served == 2:
                raise OSError("a read failed")
            if self.served > 4:
                raise StopIteration
            return self.served

    daifu.set_policy(lambda crash: daifu.Retry())

    def read(batches: Batches) -> list[int]:
        got = []
        for b in batches:
            got.append(b)
        return got

    got = daifu.transform(read)(Batches())
    assert got == [1, 3, 4]  # the item that failed is passed over, as before
    err = capfd.readouterr().err
    assert "not loaded again" in err and "not a torch DataLoader" in err


def test_a_generator_that_raised_is_refused_as_before() -> None:
    def batches() -> Any:
        yield 1
        raise OSError("a read failed")

    seen: list[daifu.Crash] = []

    def policy(crash: daifu.Crash) -> daifu.Decision:
        seen.append(crash)
        return daifu.Retry() if len(seen) == 1 else daifu.Raise()

    daifu.set_policy(policy)

    @daifu.transform
    def read() -> list[int]:
        got = []
        for b in batches():
            got.append(b)
        return got

    with pytest.raises(OSError, match="a read failed"):
        read()
    assert len(seen) == 2 and "generator that ended" in seen[1].tried[0][1]


def test_skip_iteration_at_a_generator_that_raised_leaves_the_iteration_around_it_as_before() -> None:
    def batches(epoch: int) -> Any:
        yield (epoch, 0)
        if epoch == 0:
            raise OSError("a read failed")
        yield (epoch, 1)

    daifu.set_policy(lambda crash: daifu.SkipIteration())

    @daifu.transform
    def read() -> list[Any]:
        got = []
        for epoch in range(2):
            for b in batches(epoch):
                got.append(b)
            got.append(("end", epoch))
        return got

    assert read() == [(0, 0), (1, 0), (1, 1), ("end", 1)]  # the generator has no next item: the epoch is left


def test_no_crash_no_change(capfd: pytest.CaptureFixture[str]) -> None:
    plain, plain_steps = fixed_run(train_enumerated)
    model, optimizer = model_and_optimizer()
    steps = daifu.transform(train_enumerated)(model, optimizer, loader_of(Rows(bad=None)))
    assert steps == plain_steps and same_parameters(model, plain)
    assert "DaiFu" not in capfd.readouterr().err


def train_taking_next(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: Any) -> list[Any]:
    steps = []
    for epoch in range(2):
        batches = iter(loader)
        for _ in range(len(loader)):
            x, y = next(batches)
            step(model, optimizer, x, y)
            steps.append(epoch)
    return steps


def test_a_statement_that_takes_its_batch_with_next_gets_the_batch_that_failed(
        capfd: pytest.CaptureFixture[str]) -> None:
    """minGPT's `batch = next(data_iter)`: run again, the statement asked the iterator for its next batch
    and the one that failed was lost; given back, it trains on that batch, as a run without the bad sample."""
    model, steps, seen = repaired_run(train_taking_next, FIX)
    fixed, fixed_steps = fixed_run(train_taking_next)
    assert [crash.statement for crash in seen] == ["x, y = next(batches)"]
    assert steps == fixed_steps == [0] * 4 + [1] * 4
    assert same_parameters(model, fixed)
    assert "the batch the DataLoader failed to load is loaded again" in capfd.readouterr().err
