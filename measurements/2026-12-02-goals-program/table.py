"""Issue 33's goals table from this folder's run.sh outputs (the batched folder's table script).

    python3 measurements/2026-12-02-goals-program/table.py
"""

import os
import runpy
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.argv = [sys.argv[0], here]
runpy.run_path(os.path.join(here, "..", "2026-11-28-stream-shapes-batched", "table.py"), run_name="__main__")
