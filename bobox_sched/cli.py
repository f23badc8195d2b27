"""The ``bobox`` command (also ``python -m bobox_sched``).

Each subcommand lives in its own module and registers itself here. Every subcommand has
``--help``; bad input ends with a one-line ``error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from topology.errors import TopologyError

from .errors import BoboxError

USER_ERRORS = (BoboxError, TopologyError, FileNotFoundError, NotADirectoryError, ValueError)


def _cmd_topology(sub):
    from topology import cli as tcli

    p = sub.add_parser("topology", help="show this machine's topology (like lstopo), or measure the NUMA factor",
                       description="Show NUMA nodes, CPUs and caches of this machine or of a captured tree.")
    tcli.add_arguments(p)
    p.set_defaults(func=tcli.run)


def _cmd_bench(sub):
    p = sub.add_parser("bench", help="benchmarks: overhead, speedup, locality, idle",
                       description="Benchmarks of the scheduler. Ratios are measured side by side in one run.")

    from experiments import bench_cli

    bench_cli.add_arguments(p)
    p.set_defaults(func=bench_cli.run)


def _cmd_datagen(sub):
    from experiments import run_cli

    p = sub.add_parser("datagen", help="generate TPC-H data as Parquet (cached)",
                       description="Generate the 8 TPC-H tables as DIR/<table>.parquet with tpchgen-cli. "
                       "A second call with the same arguments does nothing.")
    run_cli.add_datagen_arguments(p)
    p.set_defaults(func=run_cli.datagen_cmd)


def _cmd_run(sub):
    from experiments import run_cli

    p = sub.add_parser("run", help="run TPC-H query requests concurrently (the main job)",
                       description="Submit the queries N x M times at once and print query times and "
                       "scheduler metrics. With no arguments: SF 0.1 data (generated if missing), the query mix.")
    run_cli.add_run_arguments(p)
    p.set_defaults(func=run_cli.run)


def _cmd_experiment(sub):
    from experiments import experiment_cli

    p = sub.add_parser("experiment", help="locality experiments: CSV + PNG + report.md (the paper's figures)",
                       description="Reproduce the Bobox paper's figures on this machine: numa-factor (table 1), "
                       "packet-size (figure 1), numa-placement (figure 2), schedulers (figure 3), balancer, all; "
                       "tstream: the TStream paper's figures 8-12 and 14 (transactional shared state).")
    experiment_cli.add_arguments(p)
    p.set_defaults(func=experiment_cli.run)


def _cmd_spark(sub):
    from experiments import spark_cli

    p = sub.add_parser("spark", help="the Spark pipeline: datagen, run, report, bench (local[*] or a cluster)",
                       description="Scale out with Spark: partitioned TPC-H data, queries fanned out to executors "
                       "(each runs one Scheduler), experiment reports over many runs and hosts.")
    spark_cli.add_arguments(p)
    p.set_defaults(func=spark_cli.run)


# Subcommands, in the order of `bobox --help`. Each entry adds a parser whose defaults
# carry `func(args) -> int`.
SUBCOMMANDS = [_cmd_topology, _cmd_datagen, _cmd_run, _cmd_bench, _cmd_experiment, _cmd_spark]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bobox",
        description="bobox-sched: a NUMA-aware task scheduler for dataflow query execution.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in SUBCOMMANDS:
        add(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for reports: the command as typed
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into `head` & co.: not an error. Point stdout at devnull so the
        # interpreter's final flush does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
