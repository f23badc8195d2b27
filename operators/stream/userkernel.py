"""User kernels: the per-row work of a stream operator written by its user, as a numba
function compiled with ``@njit(nogil=True)``. The operator calls it once per packet with
whole columns (never once per row from Python), so it runs without the GIL like the
library's own kernels.

Calling conventions (the operator documents which one it uses):

* map:      ``kernel(*args, *outs)``            fills the new columns ``outs``
* filter:   ``kernel(*args, keep)``             fills the bool array ``keep``
* flat-map: ``count(*args, counts)``            fills int64 ``counts`` (outputs per row)
            ``expand(parents, rank, *args, *outs)`` fills the new columns of the outputs

``args`` are the input columns the operator was told to pass, in that order; ``outs``
are freshly allocated output columns (write every row).
"""

from __future__ import annotations

import numpy as np

from operators.expr import Field


def check_kernel(fn, what: str):
    """`fn` if it is a numba ``njit(nogil=True)`` function; ValueError otherwise (a plain
    Python function would run per-row work under the GIL)."""
    opts = getattr(fn, "targetoptions", None)
    if opts is None or not hasattr(fn, "py_func"):
        raise ValueError(f"{what} must be a numba function compiled with @njit(nogil=True), got {fn!r}")
    if not opts.get("nogil"):
        raise ValueError(f"{what} {fn.__name__} must be compiled with nogil=True (it would hold the GIL)")
    return fn


def out_fields(out) -> list[Field]:
    """Fields of the columns a kernel writes: Fields, or ``(name, numpy dtype)`` pairs."""
    fields = []
    for f in out:
        if isinstance(f, Field):
            fields.append(f)
            continue
        name, dt = f
        dt = np.dtype(dt)
        kind = {"i": "int", "u": "int", "f": "float", "b": "bool"}.get(dt.kind)
        if kind is None:
            raise ValueError(f"kernel output {name!r}: dtype {dt} is not a number")
        fields.append(Field(name, kind, dt))
    return fields


__all__ = ["check_kernel", "out_fields"]
