"""The names ``funs.kernels()`` generates into the kernel module ahead of the fragments,
declared for linters and type checkers (the fragments that call them import them under
``TYPE_CHECKING`` only; nothing here has a value at run time):

* ``apply_fun(code, cur, src, param, bits) -> float``: Fun ``code`` applied to a record
  (``funs.Fun``; an unknown code returns ``cur``);
* ``eval_cfun(code, a, b) -> bool``: CFun ``code`` on two values (``funs.CFun``; an
  unknown code is False).

The module also binds ``cpu_relax`` (``atomics.cpu_pause`` or ``cpu_nop``, decided
per machine by ``atomics.spin_with_pause`` and written into the source, so that
kernels compiled with and without the hint never share a cache entry); the fragments
import ``atomics.cpu_relax``, the same choice.
"""

from collections.abc import Callable

import numpy as np

apply_fun: Callable[[int, float, float, float, np.ndarray], float]
eval_cfun: Callable[[int, float, float], bool]
