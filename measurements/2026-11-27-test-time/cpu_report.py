"""pytest plugin: CPU seconds per test (self + waited-for children), appended as JSON lines
to $CPU_REPORT (one file per xdist worker: suffix the worker id), with each test's start and
end (epoch seconds) for a timeline of the workers."""
import json, os, resource, time
import pytest

def _cpu():
    s = resource.getrusage(resource.RUSAGE_SELF); c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    a0, b0 = _cpu(); t0 = time.perf_counter(); start = time.time()
    yield
    a1, b1 = _cpu()
    path = os.environ.get("CPU_REPORT")
    if path:
        wid = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(f"{path}.{wid}", "a") as f:
            f.write(json.dumps({"id": item.nodeid, "wall": time.perf_counter() - t0, "start": start, "end": time.time(), "self": a1 - a0, "children": b1 - b0}) + "\n")
