"""The fields of an operation buffer's rows (``F_*``, ``NF``), the operation kinds
(``READ``, ``WRITE``, ``RMW``), and two constants the kernels share: ``INF_TS`` (a ts
above every real one: "no next operation") and ``CLAIM_BITS`` (the shift of a stealer's
claim stamp, ``walk.process_pool``).

An instance's operation buffer holds int64 rows of ``NF`` fields plus a float64
parameter per row; a batch's ``oi`` (``build.py``) keeps the same fields.
"""

import numpy as np

# ---- fragment: funs.kernels() copies the text below into the kernel module ----

# Operation fields of an instance buffer row.
F_TS = 0
F_SEQ = 1
F_G = 2
F_KIND = 3
F_FUN = 4
F_SRC = 5
F_OUT = 6
F_TXN = 7
NF = 8

READ = 0
WRITE = 1
RMW = 2

INF_TS = np.int64(2**62)
# a stealer's claim stamp in ch_own: (round << CLAIM_BITS) | (stealer + 1) (process_pool)
CLAIM_BITS = 20
