"""The allowlists of `daifu.allowlist`: what code from the repair bot may use without a person.

Each table is documented where it is defined; `daifu.allowlist`'s docstring says how they combine.
"""

from __future__ import annotations

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
        "difflib",
        "pathlib",
        "numpy",
        "torch",
        "torch.nn",
        "torch.nn.functional",
        "torch.utils",
        "torch.utils.data",
        "torch.cuda",
    }
)
"""Modules an `import` may name (and their `from` forms, for names in `CALLS`, `VALUES` or `IMPORTS`)."""

BUILTINS = frozenset(
    "abs all any bool dict divmod enumerate filter float frozenset int isinstance issubclass iter len list map max "
    "min next print range repr reversed round set slice sorted str sum tuple zip".split()
)
"""Builtins that compute from their arguments and reach nothing else (`iter` with one argument only)."""

_TORCH_FUNCTIONS = (
    "tensor as_tensor from_numpy zeros ones full empty zeros_like ones_like full_like empty_like rand randn randint "
    "randperm arange linspace eye cat concat stack hstack vstack flatten reshape squeeze unsqueeze transpose permute "
    "where clamp clip isfinite isnan isinf nan_to_num isclose allclose equal all any sum mean std var max min amax "
    "amin argmax argmin abs exp log log1p sqrt pow softmax log_softmax sigmoid tanh relu matmul mm bmm einsum split "
    "chunk narrow gather index_select masked_select topk sort argsort cumsum norm dot outer numel is_tensor "
    "is_floating_point broadcast_to no_grad enable_grad inference_mode set_grad_enabled autocast device finfo iinfo "
    "get_default_dtype manual_seed round floor ceil sign maximum minimum logical_and logical_or logical_not"
)
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
_MATH_FUNCTIONS = (
    "floor ceil trunc sqrt isqrt exp log log2 log10 log1p pow fabs fmod isfinite isnan isinf isclose prod fsum gcd "
    "lcm copysign hypot sin cos tan atan2 tanh"
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
    | _paths("math", _MATH_FUNCTIONS)
    | _paths("os.path", _OS_PATH_FUNCTIONS)
    | _paths("os", "makedirs fspath listdir getcwd")
    | _paths("time", "sleep time perf_counter monotonic")
    | _paths("numpy", "asarray array isfinite isnan nan_to_num mean zeros ones")
    | _paths("torch.distributions", "Categorical Normal Bernoulli")
    | {"torch.Generator", "difflib.get_close_matches", "pathlib.Path", "pathlib.PurePath"}
)
"""Functions and classes reached through a module that compute, allocate (bounded), or touch nothing but
the process: tensor math, layer constructors, data loaders, pure path functions, `os.makedirs`, and
`time.sleep` with a literal bound. Deliberately absent: everything that reads or writes files
(`torch.load`, `torch.save`, `open`, `numpy.load`), runs code or processes, or opens connections."""

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

METHODS = frozenset(
    (
        "float double half bfloat16 long int short bool byte to cpu cuda type_as view view_as reshape reshape_as "
        "flatten unflatten unsqueeze squeeze permute transpose t contiguous detach detach_ requires_grad_ item "
        "numpy tolist clone size dim numel nelement expand expand_as repeat narrow chunk sum mean std var max "
        "min amax amin argmax argmin abs exp log sqrt pow clamp clamp_ clip nan_to_num nan_to_num_ isfinite isnan "
        "isinf any all softmax log_softmax sigmoid relu masked_fill masked_fill_ fill_ zero_ index_select gather "
        "topk sort argsort norm add sub mul div matmul eq ne lt gt le ge round floor ceil astype copy_ "
        "eval train zero_grad parameters named_parameters buffers modules children state_dict add_param_group "
        "manual_seed sample rsample log_prob entropy mkdir "
        "get keys values items index count strip lstrip rstrip lower upper startswith endswith join splitlines "
        "partition rpartition removeprefix removesuffix zfill isdigit split"
    ).split()
)
"""Methods allowed on any receiver: tensor and array conversions and math, model/optimizer bookkeeping,
random generators and distributions, `mkdir` (what `os.makedirs` may do), and reading containers and
strings. None is the name of a function with effects in `os`, `shutil`, `subprocess`, `socket`, `pickle`
or `builtins` (a test holds this); `eval` is allowed only without arguments (`model.eval()`)."""

CONTAINER_METHODS = frozenset(
    "append extend insert pop remove clear update setdefault add discard sort reverse copy".split()
)
"""Methods that change a container; allowed only on a name known to hold a list, dict or set, since on
another receiver the same names delete files (`os.remove`) or copy them (`shutil.copy`)."""

STRING_METHODS = frozenset({"replace"})
"""Methods allowed only on a name known to hold a `str` (`Path.replace` renames a file): a local holding
one when the crash happened and not rebound by the code, or a name every binding of which in the code
is certainly a `str`."""
STRING_RESULTS = frozenset("replace strip lstrip rstrip lower upper removeprefix removesuffix zfill join".split())

EFFECT_ATTRIBUTES = frozenset(
    "system popen remove unlink rmdir rmtree rename replace write write_text write_bytes tofile dump dumps save "
    "load loads open exec eval kill terminate send sendall connect spawn fork format format_map".split()
)
"""Attributes refused even as plain values (`f = x.numpy().tofile`): a callable handed to user code
that then calls it would escape the call rules. Defence in depth behind the call allowlist."""

DANGEROUS_MODULES = frozenset(
    "os posix nt posixpath ntpath subprocess shutil socket _socket ssl pickle marshal shelve dbm ctypes importlib "
    "builtins sys io pathlib tempfile code codeop runpy operator asyncio multiprocessing threading signal pty "
    "urllib http requests httpx aiohttp ftplib smtplib telnetlib xmlrpc webbrowser gc inspect types "
    "torch.serialization torch.hub torch.jit torch.package torch.utils.cpp_extension numpy.lib.npyio".split()
)
"""Modules whose callables are never admitted as "already called by the function" (`from os import system`)."""

MODULE_ALIASES = {"posixpath": "os.path", "ntpath": "os.path", "posix": "os", "nt": "os"}
BROAD_EXCEPTIONS = frozenset({"Exception", "BaseException"})
CONTAINER_TYPES = (list, dict, set)
CONTAINER_BUILDERS = frozenset({"list", "dict", "set", "sorted"})

BOUNDS_NOT_SIZES = frozenset({"torch.randint"})
"""Calls whose plain integer arguments are value bounds; only their tuple (or `size=`) is a size."""
