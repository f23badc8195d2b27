#!/bin/bash
# Issue 33 goals table at one commit (after one on_slices call per held batch of a
# packet's bucket slices): the baseline's script (the three stream papers' experiments
# and the policies comparison, --quick, one run each), writing into this folder.
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../2026-11-28-stream-shapes-baseline/run.sh" "$here"
