"""Traces of real runs (issue 34): ``recorder.py`` (what a traced run records, per worker,
and its protocol) and ``chrome.py`` (the Chrome trace event format that Perfetto and
``chrome://tracing`` open: writing, checking, summing). ``Scheduler(trace=PATH)`` turns it
on; ``bobox run --trace FILE`` and ``bobox trace FILE`` are the command-line faces."""

from bobox_sched.trace.recorder import Tracer, check_trace_path

__all__ = ["Tracer", "check_trace_path"]
