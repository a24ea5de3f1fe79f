"""The tables of `daifu.decide.allowlist`: the statements, builtins, bounds and other callables a repair may use.

Each table is documented where it is defined; `daifu.decide.allowlist`'s docstring says how they
combine. The pure functions of the numeric libraries are in `daifu.decide.allowlist_numeric`, the
system a repair may not reach in `daifu.decide.allowlist_system`.
"""

from __future__ import annotations

import ast

MAX_SLEEP_S = 60
"""Seconds `time.sleep` may wait unattended; a longer wait needs a person."""
MAX_INT = 2**32
"""Largest integer literal (after folding constant arithmetic)."""
MAX_ELEMENTS = 10**8
"""Largest product of the integer literals given to one call (a tensor's size) or repeating a sequence."""
MAX_RANGE = 10**6
"""Largest literal bound of a `range`."""
MAX_CODE = 256 * 1024
"""Characters of code the checker reads; longer code needs a person."""

IMPORTS = frozenset(
    {
        "os",
        "os.path",
        "time",
        "math",
        "cmath",
        "statistics",
        "difflib",
        "pathlib",
        "numpy",
        "numpy.linalg",
        "numpy.fft",
        "torch",
        "torch.nn",
        "torch.nn.functional",
        "torch.nn.init",
        "torch.linalg",
        "torch.fft",
        "torch.special",
        "torch.utils",
        "torch.utils.data",
        "torch.cuda",
    }
)
"""Modules an `import` may name (and their `from` forms, for the callables a repair may call, the names in
`VALUES`, or modules of `IMPORTS`)."""

BUILTINS = frozenset(
    "abs all any bool dict divmod enumerate filter float frozenset int isinstance issubclass iter len list map max "
    "min next print range repr reversed round set slice sorted str sum tuple zip".split()
)
"""Builtins that compute from their arguments and reach nothing else (`iter` with one argument only)."""

_TORCH_FUNCTIONS = (
    "is_tensor is_floating_point no_grad enable_grad inference_mode set_grad_enabled autocast device finfo iinfo "
    "get_default_dtype manual_seed Size Tensor"
)
"""torch's callables beside its ATen operators and `torch.functional` (`daifu.decide.allowlist_numeric`)."""
_CUDA_FUNCTIONS = (
    "empty_cache synchronize is_available device_count current_device memory_allocated memory_reserved "
    "max_memory_allocated mem_get_info reset_peak_memory_stats"
)
_NN_MODULES = (
    "Linear Bilinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d BatchNorm1d BatchNorm2d BatchNorm3d "
    "LayerNorm GroupNorm RMSNorm Dropout Dropout2d Embedding LSTM GRU RNN ReLU LeakyReLU GELU SiLU Tanh Sigmoid "
    "Softmax LogSoftmax Identity Flatten Unflatten MaxPool1d MaxPool2d AvgPool1d AvgPool2d AdaptiveAvgPool1d "
    "AdaptiveAvgPool2d Sequential ModuleList ModuleDict CrossEntropyLoss NLLLoss MSELoss L1Loss SmoothL1Loss BCELoss "
    "BCEWithLogitsLoss KLDivLoss HuberLoss"
)
_FUNCTIONAL = (
    "relu gelu silu leaky_relu sigmoid tanh softmax log_softmax dropout linear conv1d conv2d max_pool2d avg_pool2d "
    "adaptive_avg_pool2d layer_norm batch_norm normalize pad interpolate one_hot embedding cross_entropy nll_loss "
    "mse_loss l1_loss smooth_l1_loss binary_cross_entropy binary_cross_entropy_with_logits kl_div"
)
_OS_PATH_FUNCTIONS = (
    "join dirname basename exists isdir isfile abspath normpath splitext split expanduser relpath getsize"
)


def _paths(prefix: str, names: str) -> set[str]:
    return {f"{prefix}.{name}" for name in names.split()}


CALLS = frozenset(
    _paths("torch", _TORCH_FUNCTIONS)
    | _paths("torch.cuda", _CUDA_FUNCTIONS)
    | _paths("torch.nn", _NN_MODULES)
    | _paths("torch.nn.functional", _FUNCTIONAL)
    | _paths("torch.nn.utils", "clip_grad_norm_ clip_grad_value_")
    | _paths("torch.utils.data", "DataLoader TensorDataset Subset BatchSampler RandomSampler SequentialSampler")
    | _paths("os.path", _OS_PATH_FUNCTIONS)
    | _paths("os", "makedirs fspath listdir getcwd")
    | _paths("time", "sleep time perf_counter monotonic")
    | _paths("torch.distributions", "Categorical Normal Bernoulli")
    | {"torch.Generator", "difflib.get_close_matches", "pathlib.Path", "pathlib.PurePath"}
)
"""Callables reached through a module, beside the pure functions of the numeric libraries, that
compute, allocate (bounded), or touch nothing but the process: layer constructors, data loaders,
path functions that read no contents, `os.makedirs` (a trial admits only the folder a failing write
needs), and `time.sleep` with a literal bound. Deliberately absent: everything that reads or writes
files (`torch.load`, `torch.save`, `open`, `numpy.load`), runs code or processes, or opens connections."""

VALUES = frozenset(
    _paths(
        "torch",
        "float float32 float64 double half float16 bfloat16 long int64 int int32 int16 int8 uint8 bool "
        "complex64 Tensor",
    )
    | _paths("torch.nn", "Module Parameter")
    | _paths("torch.utils.data", "Dataset DataLoader BatchSampler RandomSampler SequentialSampler")
    | _paths("math", "pi e tau inf nan")
    | _paths("numpy", "float32 float64 int64 ndarray nan inf")
    | {"os.sep"}
)
"""Module attributes that may be read as values: dtypes, classes for `isinstance`, constants."""

CONTEXT_MANAGERS = frozenset(
    {"torch.no_grad", "torch.enable_grad", "torch.inference_mode", "torch.set_grad_enabled", "torch.autocast"}
)

RESETS = ("torch.optim.Optimizer.zero_grad", "torch.nn.Module.zero_grad")
"""Methods that set what they change to one value whatever they find there (every gradient to None or zero):
run again where they ran, they leave what their first run left (`daifu.decide.rerun_effects`). Only these
functions themselves, by identity: a subclass's own `zero_grad` may do anything."""

METHODS = frozenset(
    (
        "eval train zero_grad parameters named_parameters buffers named_buffers modules named_modules children "
        "state_dict add_param_group manual_seed sample rsample log_prob entropy mkdir "
        "get keys values items index count strip lstrip rstrip lower upper startswith endswith join splitlines "
        "partition rpartition removeprefix removesuffix zfill isdigit isalpha isalnum isspace split rsplit title "
        "capitalize casefold center ljust rjust encode decode"
    ).split()
)
"""Methods allowed on any receiver beside the pure methods of tensors and arrays (`allowlist_numeric`):
model and optimizer bookkeeping, random generators and distributions, `mkdir` (what `os.makedirs` may
do), and reading containers and strings. None names a method of the system's types
(`allowlist_system.system_attributes`; a test holds this); `eval` is allowed only without arguments."""

CONTAINER_METHODS = frozenset(
    "append extend insert pop remove clear update setdefault add discard sort reverse copy".split()
)
"""Methods that change a container. Those that are also the names of the system's methods (`remove`,
`copy`, `add`: `os.remove`, `shutil.copy`, `TarFile.add`) are allowed only on a name known to hold a list,
dict or set; the others (`append`, `setdefault`, `update`) on any receiver: they change the program's
own values, nothing outside it."""

STRING_METHODS = frozenset({"replace"})
"""Methods allowed only on a name known to hold a `str` (`Path.replace` renames a file): a local holding
one when the crash happened and not rebound by the code, or a name every binding of which in the code
is certainly a `str`."""
STRING_RESULTS = frozenset("replace strip lstrip rstrip lower upper removeprefix removesuffix zfill join".split())

MODULE_ALIASES = {"posixpath": "os.path", "ntpath": "os.path", "posix": "os", "nt": "os"}
BROAD_EXCEPTIONS = frozenset({"Exception", "BaseException"})
CONTAINER_TYPES = (list, dict, set)
CONTAINER_BUILDERS = frozenset({"list", "dict", "set", "sorted"})


def builds_container(value: ast.expr | None) -> bool:
    """Whether `value` makes a new list, dict or set (a display, a comprehension, `set()`, `sorted(...)`)."""
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in CONTAINER_BUILDERS

BOUNDS_NOT_SIZES = frozenset({"torch.randint"})
"""Calls whose plain integer arguments are value bounds; only their tuple (or `size=`) is a size."""
