"""What every ``bobox experiment`` is built on: the context it runs in, the recorder of
its measurements, markdown tables, figures and its section of the report.

An experiment gets:

* the context (:class:`Ctx`): the output folder, ``--repeat``/``--quick``, the TPC-H
  data (generated on first use), the probed machine (``ctx.topo``), the command line and
  a progress bar; :func:`make_scheduler` opens a scheduler on that machine with the
  context's threads per node;
* the recorder (:class:`Recorder`): every measurement as one row of ``DIR/<name>.csv``
  in long format (:data:`CSV_COLUMNS`: ``experiment, host, run_id, series, x, metric,
  value, repeat, unit``), so runs from many hosts concatenate and ``bobox spark report``
  can summarize them; ``median`` of a point's repeats;
* markdown tables (:func:`md_table`) and byte sizes (:func:`fmt_bytes`) for the report;
* figures: :func:`pyplot` (matplotlib without a display), :func:`panel_grid` and
  :func:`panel_rows` (a figure with exactly the panels that have data, so a run of a
  subset of an experiment's figures leaves no empty axes) and :func:`save_figure`
  (``DIR/<name>.png``, written atomically);
* its section of ``DIR/report.md`` (:func:`write_section`): replaced when the experiment
  runs again, the other experiments' sections kept; the report starts with the machine
  summary (:func:`machine_summary`), refreshed on every write.

Each experiment builds its context in its ``run_experiment`` (its options differ) and
writes its own CSV, PNG(s) and section; the experiments' module docs say what they measure.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import gc
import os
import platform
import re
import socket
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import topology as T

CSV_COLUMNS = ["experiment", "host", "run_id", "series", "x", "metric", "value", "repeat", "unit"]


# ---------------------------------------------------------------------------------------
# context and recorder


@dataclass
class Ctx:
    """One run of ``bobox experiment``: where the files go and what the options said."""

    out: Path
    repeat: int
    quick: bool
    data_arg: str | None
    sf: float | None
    threads_per_node: int | None
    virtual_nodes: int | None
    progress: bool
    command: str
    topo: T.Topology = field(default=None)
    array_bytes: int | None = None  # numa-factor's array (--bytes); None: its default
    domains: str | int | None = None  # --domains: make_scheduler's runtime in domain processes (None/"off": not)
    host: str = field(default_factory=socket.gethostname)
    run_id: str = field(default_factory=lambda: _dt.datetime.now().strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}")
    _data: Path | None = None

    @property
    def data(self) -> Path:
        if self._data is None:
            from experiments.workload import ensure_data

            self._data = ensure_data(self.data_arg, self.sf, progress=self.progress)
        return self._data

    @classmethod
    def from_args(cls, args, repeat: int | tuple[int, int] = (3, 5), *, data: bool = False,
                  threads: bool = False, virtual_nodes: bool = False, make_folder: bool = True) -> "Ctx":
        """The context of one ``bobox experiment NAME`` from its parsed arguments: the
        ``--out`` folder (created unless `make_folder` is false: the experiment checks
        more first), the repeats (`repeat`: --repeat or its default with --quick /
        without; a plain int ignores --repeat), progress, the command as typed, the
        machine probed. `data`, `threads`, `virtual_nodes`: the experiment reads
        --data/--sf, --threads-per-node, --virtual-nodes (else they are None)."""
        import shlex

        out = output_folder(args.out) if make_folder else Path(args.out)
        if isinstance(repeat, int):
            n = repeat
        else:
            n = getattr(args, "repeat", None) or (repeat[0] if args.quick else repeat[1])
        argv = getattr(args, "argv", None) or ["experiment", getattr(args, "name", "")]
        ctx = cls(out=out, repeat=n, quick=args.quick,
                  data_arg=args.data if data else None, sf=args.sf if data else None,
                  threads_per_node=args.threads_per_node if threads else None,
                  virtual_nodes=args.virtual_nodes if virtual_nodes else None,
                  progress=not args.no_progress, command="bobox " + " ".join(shlex.quote(a) for a in argv),
                  array_bytes=getattr(args, "bytes", None), domains=getattr(args, "domains", None))
        ctx.topo = T.probe()
        return ctx

    def bar(self, total: int, desc: str):
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="run", file=sys.stderr, leave=False, disable=not self.progress)


class Recorder:
    """Collects the measurements of one experiment and writes the CSV."""

    def __init__(self, ctx: Ctx, experiment: str):
        self.ctx = ctx
        self.experiment = experiment
        self.rows: list[dict] = []

    def add(self, series, x, metric, value, repeat=0, unit="") -> None:
        self.rows.append({
            "experiment": self.experiment, "host": self.ctx.host, "run_id": self.ctx.run_id,
            "series": str(series), "x": str(x), "metric": metric, "value": float(value),
            "repeat": int(repeat), "unit": unit,
        })

    def median(self, series, x, metric) -> float | None:
        v = [r["value"] for r in self.rows if r["series"] == str(series) and r["x"] == str(x) and r["metric"] == metric]
        return statistics.median(v) if v else None

    def write(self) -> Path:
        path = self.ctx.out / f"{self.experiment}.csv"
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            w.writeheader()
            w.writerows(self.rows)
        os.replace(tmp, path)
        return path


def output_folder(path) -> Path:
    """`path` as a folder that exists (created with its parents), or a one-line
    BoboxError naming it: every experiment's first step, before any work."""
    from bobox_sched.core.errors import BoboxError

    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BoboxError(f"cannot create output folder {out}: {e.strerror or e}") from None
    return out


def make_scheduler(ctx: Ctx, **kw):
    """A scheduler on the context's machine and threads per node (`kw` overrides them);
    with ``--domains`` its runtime runs in domain processes (each probes its own part of
    the machine, so no topology is passed)."""
    from bobox_sched import Scheduler

    kw.setdefault("threads_per_node", ctx.threads_per_node)
    if ctx.domains not in (None, "off"):
        from operators import released

        kw.setdefault("domains", ctx.domains)
        kw.setdefault("domain_init", released.enable)  # as bobox run: GIL-released timing in every domain
        s = Scheduler(**kw)
        doms = getattr(s, "domains", None)
        print(f"[experiment] the runtime in {len(doms)} domain processes ({sum(d['workers'] for d in doms)} workers)"
              if doms else "[experiment] --domains: the layout has no domains here (one in-process runtime)",
              file=sys.stderr)
        return s
    kw.setdefault("topology", ctx.topo)
    return Scheduler(**kw)


# ---------------------------------------------------------------------------------------
# tables and the report


def fmt_bytes(n) -> str:
    if n is None:
        return "unknown"
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024:
        return f"{n / 1024:g} KiB"
    return f"{n} B"


def error_line(e: BaseException) -> str:
    """An exception as one line: its type and the first line of its message (what a
    report says of a configuration that failed)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".strip()


def median_or_none(xs):
    """The median of the values that are not None; None if there are none."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def md_table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def machine_summary(topo: T.Topology) -> str:
    l1 = topo.cache_bytes(1)
    l2 = topo.cache_bytes(2)
    l3 = topo.cache_bytes(3)
    lines = [
        f"- host: `{socket.gethostname()}`, {platform.system()} {platform.release()}, Python {platform.python_version()}",
        f"- CPU: {topo.cpu_model or 'unknown'}; {len(topo.cpus)} CPUs in {len(topo.cpu_nodes)} NUMA node(s)",
        f"- caches (smallest per level): L1d {fmt_bytes(l1)}, L2 {fmt_bytes(l2)}, L3 {fmt_bytes(l3)}; "
        f"default packet {fmt_bytes(topo.packet_bytes)} (half the L2)",
    ]
    for n in topo.nodes:
        mem = f"{n.memory_bytes / 2**30:.1f} GiB" if n.memory_bytes else "unknown memory"
        lines.append(f"- node {n.os_index}: CPUs {','.join(map(str, n.cpus)) or '-'}, {mem}, distances "
                     f"{' '.join(map(str, n.distances))}")
    for note in topo.notes:
        lines.append(f"- note: {note}")
    return "\n".join(lines)


def write_section(ctx: Ctx, name: str, title: str, body: str) -> Path:
    """Put (or replace) the section of experiment `name` in DIR/report.md."""
    path = ctx.out / "report.md"
    head = (f"# bobox-sched locality experiments\n\n## Machine\n\n{machine_summary(ctx.topo)}\n\n"
            f"Measurements: median of each point's repeats; raw values in the CSV files.\n")
    text = path.read_text() if path.exists() else head
    if not text.startswith("# bobox-sched locality experiments"):
        text = head + "\n" + text
    else:  # refresh the machine summary
        text = re.sub(r"## Machine\n\n.*?\n\nMeasurements:", f"## Machine\n\n{machine_summary(ctx.topo)}\n\nMeasurements:",
                      text, count=1, flags=re.S)
    start, end = f"<!-- bobox:{name} -->", f"<!-- /bobox:{name} -->"
    section = (f"{start}\n## {title}\n\n"
               f"Command: `{ctx.command}` (run {ctx.run_id}, {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')})\n\n"
               f"{body.strip()}\n{end}")
    if start in text and end in text:
        text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _m: section, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    tmp = path.with_name(".report.md.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------------------
# figures


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def panel_rows(counts: Sequence[int], panel_size: tuple[float, float] = (5.0, 4.0)):
    """A figure with one row per entry of `counts`, holding that many panels from the left:
    ``(figure, rows of axes)``, exactly ``sum(counts)`` axes, each ``panel_size`` inches
    (width, height). The grid is as wide as the longest row."""
    counts = list(counts)
    if not counts or min(counts) < 1:
        raise ValueError(f"panel_rows: every row needs at least one panel, got {counts}")
    ncols, nrows = max(counts), len(counts)
    fig = pyplot().figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows))
    rows = [[fig.add_subplot(nrows, ncols, i * ncols + k + 1) for k in range(c)] for i, c in enumerate(counts)]
    return fig, rows


def panel_grid(n: int, ncols: int = 3, panel_size: tuple[float, float] = (5.0, 4.0)):
    """A figure with exactly `n` panels, `ncols` to a row (fewer when `n` is smaller), the
    last row holding the rest: ``(figure, list of n axes)`` in reading order."""
    if n < 1 or ncols < 1:
        raise ValueError(f"panel_grid: needs at least one panel and one column, got n={n}, ncols={ncols}")
    ncols = min(ncols, n)
    fig, rows = panel_rows([ncols] * (n // ncols) + ([n % ncols] if n % ncols else []), panel_size)
    return fig, [ax for row in rows for ax in row]


def save_figure(fig, ctx: Ctx, name: str) -> Path:
    """Write `fig` to DIR/<name>.png (atomically) and close it."""
    path = ctx.out / f"{name}.png"
    tmp = path.with_name(f".{name}.tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)
    pyplot().close(fig)
    return path


__all__ = ["CSV_COLUMNS", "Ctx", "Recorder", "error_line", "fmt_bytes", "machine_summary", "make_scheduler",
           "md_table", "median_or_none", "panel_grid", "panel_rows", "pyplot", "save_figure", "write_section"]


_frozen = [0]  # frozen_heap()s open in this process (the main thread's experiment)


@contextlib.contextmanager
def frozen_heap():
    """For the measured runs: the heap as it is now moved out of the collector's sight
    (`gc.freeze`), and with it what survives each `collect_before_run()`, so that the
    collection before a run walks only what the last run made, not the millions of objects
    that numba, pyarrow and matplotlib hold. Measured in the regions experiment's process:
    88 ms a full collection, 259 of them in `--quick` (23 of its 54 s at a small work
    budget). `bobox experiment` runs every experiment inside it
    (experiments/cli/experiment.py). Unfrozen on exit: a caller in a long-lived process
    gets its collector back whole."""
    gc.collect()
    gc.freeze()
    _frozen[0] += 1
    try:
        yield
    finally:
        _frozen[0] -= 1
        if not _frozen[0]:
            gc.unfreeze()


def collect_before_run() -> None:
    """The previous runs' garbage, collected now, outside the timing; inside
    `frozen_heap()` what survives is frozen too (results and records the experiment keeps:
    small, and released with the heap at its end)."""
    gc.collect()
    if _frozen[0]:
        gc.freeze()
