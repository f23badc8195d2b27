#!/bin/bash
# Issue 33 goals table at one commit (after TStream's chain-free batches): the baseline's
# script (the three stream papers' experiments and the policies comparison, --quick, one
# run each), writing into this folder. Table: python3 measurements/2026-12-02-goals/table.py
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../2026-11-28-stream-shapes-baseline/run.sh" "$here"
