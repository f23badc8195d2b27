"""``bobox trace FILE``: check a Chrome trace written by ``bobox run --trace`` (or
``Scheduler(trace=...)``), print its per-worker summary and draw its timeline PNG
(``experiments/trace_view.py``)."""

from __future__ import annotations

import json

from experiments.cli.argtypes import path


def add_arguments(p) -> None:
    p.add_argument("file", type=path, metavar="FILE", help="a trace JSON file (Chrome trace event format)")
    p.add_argument("--png", type=path, metavar="OUT",
                   help="draw the timeline to OUT (default: FILE with .png; --no-png: none)")
    p.add_argument("--no-png", action="store_true", help="draw no picture")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (the last line)")


def run(args) -> int:
    from bobox_sched.core.errors import BoboxError
    from bobox_sched.trace import chrome

    from experiments.cli.outputs import check_creatable
    from experiments.trace_view import format_summary, png_beside, summary, timeline_png

    from pathlib import Path

    if not Path(args.file).is_file():
        raise BoboxError(f"trace {args.file}: no such file")
    out = None if args.no_png else Path(args.png or png_beside(args.file))
    if out is not None:
        check_creatable(out, "--png")  # before reading a large trace
    try:
        doc = chrome.load(args.file)
    except (OSError, ValueError) as e:
        raise BoboxError(f"trace {args.file}: not a JSON trace ({' '.join(str(e).split())})") from None
    problems = chrome.validate(doc)
    if problems:
        raise BoboxError(f"trace {args.file}: {len(problems)} problem(s), first: {problems[0]}")
    rows = summary(doc)
    print(format_summary(rows))
    if out is not None and rows:
        timeline_png(doc, out)
        print(f"wrote {out}")
    if args.json:
        print(json.dumps({"workers": rows, "png": None if out is None else str(out)}))
    return 0
