#!/bin/bash
# Issue 33 goals table at one commit (after batched ports): the baseline's script
# (../2026-11-28-stream-shapes-baseline/run.sh: the three stream papers' experiments and
# the policies comparison, --quick, one run each), writing into this folder.
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../2026-11-28-stream-shapes-baseline/run.sh" "$here"
