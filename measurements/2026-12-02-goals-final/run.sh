#!/bin/bash
# Issue 33's goals table at the session-16 commit (the measured causes of 004's misses in
# ../2026-12-02-elastic-causes/): the baseline's script (the three stream papers'
# experiments and the policies comparison, --quick, one run each), writing into this
# folder. Table: python3 measurements/2026-12-02-goals-final/table.py
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../2026-11-28-stream-shapes-baseline/run.sh" "$here"
