"""The pure functions of the numeric libraries: what a repair may compute with, whatever the program calls.

A repair changes how values are computed. The libraries a training program computes with are torch,
numpy, math, cmath and statistics; their pure functions — a result from the arguments, nothing read
from or written to files, processes, connections or the environment — are admitted, judged by the
live object a name stands for (`from numpy import median as med` makes `med` admitted too):

- torch: every ATen operator torch exposes (`torch.X` that is `torch._C._VariableFunctions.X`:
  `torch.median`, `torch.where`, `torch.cat`) and the Python functions of `torch.functional`
  (`torch.einsum`, `torch.norm`), less `torch.from_file` (it reads a file); every public function of
  `torch.linalg`, `torch.fft`, `torch.special`, `torch.nn.functional` and `torch.nn.init`; and
  `TORCH_DESCRIPTIONS` (`torch.finfo`, `torch.is_tensor`, `torch.get_default_dtype`);
- numpy: every ufunc (`np.exp`, `np.isfinite`), `NUMPY_FUNCTIONS` (`np.median`, `np.percentile`,
  `np.concatenate`; not `np.load`, `np.fromfile`, `np.save`, `np.loadtxt`, `np.genfromtxt`), the scalar
  and array types of `NUMPY_TYPES`, and every public function of `numpy.linalg` and `numpy.fft`;
- math, cmath, statistics: every public function;
- methods of tensors and arrays (`tensor_methods`): the ATen methods of `torch.Tensor` and the methods of
  `numpy.ndarray` — conversions (`.float()`, `.to_dense()`, `.detach()`, `.numpy()`), math, shapes,
  in-place updates — less `NOT_PURE_METHODS`: those that hand out raw memory, run a callable, share
  memory with other processes or write a file.

What counts is computed from the installed libraries, so an operator a new torch adds is admitted as
the operators before it were; the exclusions are the reviewed part.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

PURE_MODULES = ("math", "cmath", "statistics", "torch.linalg", "torch.fft", "torch.special", "torch.nn.functional",
                "torch.nn.init", "numpy.linalg", "numpy.fft")
"""Modules every public function of which is pure computation."""

READS_A_FILE = frozenset({"from_file"})
"""ATen operators that read a file: the exception among them."""

NUMPY_FUNCTIONS = frozenset(
    (
        "all allclose amax amin angle any append arange argmax argmin argpartition argsort argwhere around array "
        "array_equal array_equiv array_split asanyarray asarray asarray_chkfinite ascontiguousarray asfortranarray "
        "astype atleast_1d atleast_2d atleast_3d average bartlett bincount blackman block broadcast_arrays "
        "broadcast_shapes broadcast_to can_cast choose clip column_stack common_type compress concat concatenate "
        "convolve copy copyto corrcoef correlate count_nonzero cov cross cumprod cumsum cumulative_prod "
        "cumulative_sum delete diag diag_indices diag_indices_from diagflat diagonal diff digitize dot dsplit dstack "
        "ediff1d einsum einsum_path empty empty_like expand_dims extract eye fill_diagonal fix flatnonzero flip "
        "fliplr flipud frombuffer full full_like geomspace gradient hamming hanning histogram histogram2d "
        "histogram_bin_edges histogramdd hsplit hstack i0 identity imag indices inner insert interp intersect1d "
        "isclose iscomplex iscomplexobj isdtype isin isneginf isposinf isreal isrealobj isscalar issubdtype "
        "iterable ix_ kaiser kron lexsort linspace logspace matrix_transpose max mean median meshgrid min "
        "min_scalar_type moveaxis nan_to_num nanargmax nanargmin nancumprod nancumsum nanmax nanmean nanmedian "
        "nanmin nanpercentile nanprod nanquantile nanstd nansum nanvar ndim nonzero ones ones_like outer packbits "
        "pad partition percentile permute_dims place poly polyadd polyder polydiv polyfit polyint polymul polysub "
        "polyval prod promote_types ptp put put_along_axis putmask quantile ravel ravel_multi_index real "
        "real_if_close repeat require reshape resize result_type roll rollaxis roots rot90 round row_stack "
        "searchsorted select setdiff1d setxor1d shape sinc size sort sort_complex split squeeze stack std sum "
        "swapaxes take take_along_axis tensordot tile trace transpose trapezoid tri tril tril_indices "
        "tril_indices_from trim_zeros triu triu_indices triu_indices_from union1d unique unique_all unique_counts "
        "unique_inverse unique_values unpackbits unravel_index unstack unwrap vander var vdot vsplit vstack where "
        "zeros zeros_like"
    ).split()
)
"""numpy's functions that compute: not its readers and writers (`load`, `save`, `savez`, `savetxt`,
`loadtxt`, `genfromtxt`, `fromfile`, `fromregex`, `memmap`), its global settings (`seterr`,
`set_printoptions`, `setbufsize`), nor what prints or introspects (`info`, `show_config`, `test`)."""

NUMPY_TYPES = frozenset(
    "bool bool_ byte bytes_ cdouble complex128 complex64 csingle double dtype finfo float16 float32 float64 half "
    "iinfo int16 int32 int64 int8 int_ intc intp long longlong ndarray short single str_ ubyte uint uint16 "
    "uint32 uint64 uint8 uintc uintp ulong ulonglong ushort".split()
)
"""numpy's scalar and array types: conversions (`np.float32(x)`) and `isinstance` checks."""

TORCH_DESCRIPTIONS = frozenset(
    "finfo iinfo is_tensor is_storage get_default_dtype is_grad_enabled is_inference_mode_enabled "
    "is_autocast_enabled Size dtype device".split()
)
"""torch's callables beside its operators that describe a value, a dtype or the modes in force and change
nothing: the limits of a dtype (`torch.finfo(p.dtype).tiny`, what keeps a log off 0), whether a value is a
tensor, the default dtype, a size, a dtype or a device made from its description."""

NOT_PURE_METHODS = frozenset(
    "apply_ map_ map2_ register_hook register_post_accumulate_grad_hook backward share_memory_ is_shared storage "
    "storage_type untyped_storage data_ptr const_data_ptr record_stream pin_memory set_ as_subclass module_load "
    "reinforce tofile dump dumps setflags ctypes".split()
)
"""Methods of tensors and arrays that are not pure computation: they hand out raw memory or storage,
run a callable later (hooks) or now (`apply_`), change what other processes see (`share_memory_`),
run the backward pass again, or write a file (`tofile`, `dump`)."""


def pure_objects() -> dict[int, str]:
    """Every pure function and type of the numeric libraries already imported, by identity, with its path.

    Each module is read again only when it was imported (again) since it was read, the others kept (a crash
    read thousands of names each time; a program whose first optimizer step imports `numpy.fft`, through
    torch, had the whole table read again at its first crash); the objects are held with what was read, so
    that no identity in it can come to name another object. A name the program rebinds later is not
    followed: its new value is not in it, and is judged as any other callable."""
    key = tuple(id(sys.modules.get(name)) for name in _PURE_SOURCES)
    if _pure_read.get("key") != key:
        found: dict[int, str] = {}
        for part in _PARTS:
            for path, value in _read_part(part):
                found.setdefault(id(value), path)
        _pure_read.update(key=key, found=found)
    return dict(_pure_read["found"])


_PARTS: tuple[tuple[str, ...], ...] = (("torch", "torch.functional"), ("numpy",), *((name,) for name in PURE_MODULES))
"""The modules `_part_items` reads together, in the order their paths are given (the first path read names an
object found under several)."""
_PURE_SOURCES = tuple(name for part in _PARTS for name in part)
"""The modules `_part_items` reads."""
_pure_read: dict[str, Any] = {}
_parts_read: dict[tuple[str, ...], tuple[tuple[int, ...], list[tuple[str, Any]]]] = {}


def _read_part(part: tuple[str, ...]) -> list[tuple[str, Any]]:
    """`_part_items(part)`, read again only when one of its modules is another object than when it was read."""
    key = tuple(id(sys.modules.get(name)) for name in part)
    known = _parts_read.get(part)
    if known is None or known[0] != key:
        known = _parts_read[part] = (key, list(_part_items(part)))
    return known[1]


def _part_items(part: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """The pure objects of the modules `part` names, with their paths. Read from the modules' own namespaces,
    never through `getattr`: a lazy attribute (numpy's `testing`, torch's `_dynamo`) must not be imported
    into the program by looking."""
    if part[0] == "torch":
        names = _namespace(sys.modules.get("torch"))
        if not names:
            return
        operators = getattr(names.get("_C"), "_VariableFunctions", None)  # an object of a class of torch's C code
        for name in _namespace(type(operators)):
            value = names.get(name)
            if not name.startswith("_") and name not in READS_A_FILE and value is getattr(operators, name, None):
                yield f"torch.{name}", value
        for name in TORCH_DESCRIPTIONS:
            if name in names:
                yield f"torch.{name}", names[name]
        functional = _namespace(sys.modules.get("torch.functional"))
        for name in functional.get("__all__", ()):
            if isinstance(name, str) and name in functional and names.get(name) is functional[name]:
                yield f"torch.{name}", functional[name]
    elif part[0] == "numpy":
        names = _namespace(sys.modules.get("numpy"))
        ufunc = names.get("ufunc")
        for name, value in names.items():
            if name.startswith("_"):
                continue
            if name in NUMPY_FUNCTIONS or name in NUMPY_TYPES or (isinstance(ufunc, type) and isinstance(value, ufunc)):
                yield f"numpy.{name}", value
    else:
        module_name = part[0]
        root = module_name.split(".")[0]
        for name, value in _namespace(sys.modules.get(module_name)).items():
            if name.startswith("_") or isinstance(value, types.ModuleType) or not callable(value):
                continue
            if (_owner_name(value) or "").startswith(root):
                yield f"{module_name}.{name}", value


def _namespace(owner: Any) -> dict[str, Any]:
    """A module's or a class's own namespace (`{}` for anything else), read without running its code."""
    try:
        if isinstance(owner, types.ModuleType):
            found = object.__getattribute__(owner, "__dict__")
        elif isinstance(owner, type):
            found = dict(type.__dict__["__dict__"].__get__(owner, type))
        else:
            return {}
    except Exception:  # noqa: BLE001 - a namespace that cannot be read offers nothing
        return {}
    return found if isinstance(found, dict) else {}


def _owner_name(value: Any) -> str | None:
    """The module that defines a library function or type (`value.__module__`, read only from C-level slots)."""
    if isinstance(value, type):
        owner = type.__dict__["__module__"].__get__(value, type)
    elif isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        owner = value.__module__
    else:
        owner = type.__dict__["__module__"].__get__(type(value), type)
    return owner if isinstance(owner, str) else None


def tensor_methods() -> frozenset[str]:
    """The methods of tensors and arrays that compute (`float`, `to_dense`, `median`, `copy_`), by name."""
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    kinds = [_namespace(torch).get("Tensor"), _namespace(numpy).get("ndarray")]
    found: set[str] = set()
    for kind in kinds:
        if isinstance(kind, type):
            found |= _methods(kind)
    return frozenset(found - NOT_PURE_METHODS)


def _methods(kind: type) -> set[str]:
    """The public names `kind` and its bases (but `object`) define as functions or C methods; the first
    definition along the MRO decides (a property over a method is no method)."""
    seen: set[str] = set()
    found: set[str] = set()
    for klass in kind.__mro__[:-1]:
        for name, member in _namespace(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(member, (types.FunctionType, types.MethodDescriptorType)):
                found.add(name)
    return found
