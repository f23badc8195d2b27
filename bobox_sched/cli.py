"""The ``bobox`` command (also ``python -m bobox_sched``).

Each subcommand lives in its own module and registers itself here. Every subcommand has
``--help``; bad input ends with a one-line ``error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys

from topology.errors import TopologyError

from .errors import BoboxError

USER_ERRORS = (BoboxError, TopologyError, FileNotFoundError, NotADirectoryError, ValueError)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``error: --concurrency must be positive, got 0
    (see bobox run --help)`` on stderr and exit status 2 (argparse's own ``error`` prints
    its usage block first: several lines)."""

    def error(self, message):
        message = " ".join(str(message).split())
        m = re.match(r"argument (\S+?)(?:/\S+)?: (.*)", message)
        if m:  # "argument --sf: must be positive" -> "--sf must be positive"
            message = f"{m.group(1)}{' ' if m.group(2).startswith('must ') else ': '}{m.group(2)}"
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    return f"warning: {' '.join(str(message).split())}\n"


def _cmd_topology(sub):
    from topology import cli as tcli

    p = sub.add_parser("topology", help="show this machine's topology (like lstopo), or measure the NUMA factor",
                       description="Show NUMA nodes, CPUs and caches of this machine or of a captured tree.")
    tcli.add_arguments(p)
    p.set_defaults(func=tcli.run)


def _cmd_bench(sub):
    p = sub.add_parser("bench", help="benchmarks: overhead, speedup, locality, queries, gil, packets, idle",
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
                       "regions: parallel regions (safe data parallelism, seed 001: figures 7, 9, 11, 12/13); "
                       "ordered: ordered stream processing (Prasaad et al., seed 000: figures 8-14); "
                       "streams: IBM Streams' threading models (Schneider & Wu, seed 004: figures 8-10); "
                       "tstream: transactional shared state (TStream, seed 002: figures 8-12 and 14); "
                       "policies: every scheduling policy side by side on one stream workload.")
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
    p = _Parser(
        prog="bobox",
        description="bobox-sched: a NUMA-aware task scheduler for dataflow query execution.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in SUBCOMMANDS:
        add(sub)
    return p


def main(argv=None) -> int:
    import warnings

    from . import outputs, procs

    warnings.formatwarning = _one_line_warning
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for reports: the command as typed
    procs.install_signal_handlers()
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        # Ctrl-C (SIGINT) or kill (SIGTERM/SIGHUP, procs.Terminated): no child process and
        # no temporary file may outlive the command.
        procs.ignore_interrupts()
        procs.kill_all()
        outputs.remove_owned()
        signum = getattr(e, "signum", 2)
        print(f"interrupted ({'SIGINT' if signum == 2 else signal.Signals(signum).name}): "
              "child processes stopped, temporary files removed", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        # Output piped into `head` & co.: not an error. Point stdout at devnull so the
        # interpreter's final flush does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
