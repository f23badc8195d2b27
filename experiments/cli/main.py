"""The ``bobox`` command (also ``python -m bobox_sched``).

Each subcommand lives in its own module and registers itself here. Every subcommand has
``--help``; bad input ends with a one-line ``error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import sys

from topology.errors import TopologyError

from bobox_sched.core.errors import BoboxError

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


# Subcommands, in the order of `bobox --help`: (name, module, its add-arguments and run
# functions, help, description). The module is imported only when the parser is built,
# and each run function takes the parsed args and returns the exit status.
SUBCOMMANDS = [
    ("topology", "experiments.cli.topology", "add_arguments", "run",
     "show this machine's topology (like lstopo), or measure the NUMA factor",
     "Show NUMA nodes, CPUs and caches of this machine or of a captured tree."),
    ("datagen", "experiments.cli.run", "add_datagen_arguments", "datagen_cmd",
     "generate TPC-H data as Parquet (cached)",
     "Generate the 8 TPC-H tables as DIR/<table>.parquet with tpchgen-cli. "
     "A second call with the same arguments does nothing."),
    ("run", "experiments.cli.run", "add_run_arguments", "run",
     "run TPC-H query requests concurrently (the main job)",
     "Submit the queries N x M times at once and print query times and "
     "scheduler metrics. With no arguments: SF 0.1 data (generated if missing), the query mix."),
    ("sql", "experiments.cli.sql", "add_arguments", "run",
     "run one SQL query (or --explain it) on the scheduler",
     "Plan a SQL query (sqlglot: parse, qualify, fold constants; subqueries unnested into joins; join order "
     "from Parquet statistics) and run it on the scheduler: print the result, write it (--output), or print "
     "the plan (--explain). Errors in the text are one line with their position, exit status 2."),
    ("trace", "experiments.cli.trace", "add_arguments", "run",
     "check a trace of a run, print its per-worker summary, draw its timeline",
     "Read a Chrome trace written by bobox run --trace (Perfetto and chrome://tracing open it too): "
     "check it, print tasks, busy and GIL-held time, rows, steals and sleeps per worker, and draw "
     "the workers x time picture."),
    ("simulate", "experiments.cli.simulate", "add_arguments", "run",
     "simulate a policy on a machine you may not have (virtual workers, virtual clock)",
     "Run the unchanged scheduling policy (bobox or simple) on virtual workers and a virtual clock, on this "
     "machine, a captured sysfs tree or a described one ('4 nodes x 16 cores, smt 2'), over one seed or many, "
     "checking the runtime's invariants at every step; --trace writes the run in the trace format of real runs."),
    ("bench", "experiments.cli.bench", "add_arguments", "run",
     "benchmarks: overhead, speedup, locality, queries, gil, packets, ring, domains, idle",
     "Benchmarks of the scheduler. Ratios are measured side by side in one run."),
    ("experiment", "experiments.cli.experiment", "add_arguments", "run",
     "locality experiments: CSV + PNG + report.md (the paper's figures)",
     "Reproduce the Bobox paper's figures on this machine: numa-factor (table 1), "
     "packet-size (figure 1), numa-placement (figure 2), schedulers (figure 3), balancer, all; "
     "regions: parallel regions (safe data parallelism, seed 001: figures 7, 9, 11, 12/13); "
     "ordered: ordered stream processing (Prasaad et al., seed 000: figures 8-14); "
     "streams: IBM Streams' threading models (Schneider & Wu, seed 004: figures 8-10); "
     "tstream: transactional shared state (TStream, seed 002: figures 8-12 and 14); "
     "policies: every scheduling policy side by side on one stream workload."),
    ("spark", "experiments.cli.spark", "add_arguments", "run",
     "the Spark pipeline: datagen, run, report, bench (local[*] or a cluster)",
     "Scale out with Spark: partitioned TPC-H data, queries fanned out to executors "
     "(each runs one Scheduler), experiment reports over many runs and hosts."),
]


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="bobox",
        description="bobox-sched: a NUMA-aware task scheduler for dataflow query execution.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module, add, run, help_, description in SUBCOMMANDS:
        mod = importlib.import_module(module)
        sp = sub.add_parser(name, help=help_, description=description)
        getattr(mod, add)(sp)
        sp.set_defaults(func=getattr(mod, run))
    return p


def main(argv=None) -> int:
    import warnings

    from experiments.cli import outputs
    from experiments.cli import procs

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


if __name__ == "__main__":  # python -m experiments.cli.main (python -m bobox_sched does the same)
    sys.exit(main())
