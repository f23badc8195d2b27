#!/bin/bash
# Issue 33's goals table with TStream's apps on access programs (one kernel call per
# packet for compute mode, derived-column kernels for post-processing): the baseline's
# script (the three stream papers' experiments and the policies comparison, --quick, one
# run each), writing into this folder. Table: python3 measurements/2026-12-02-goals-program/table.py
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../2026-11-28-stream-shapes-baseline/run.sh" "$here"
