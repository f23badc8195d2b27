"""User-facing error types of the runtime."""


class BoboxError(Exception):
    """Bad input to the runtime or the CLI (one-line message, CLI exit status 2)."""


class SchedulerShutdown(BoboxError, RuntimeError):
    """A request was submitted to a scheduler that is shut down."""


class RequestCancelled(Exception):
    """Raised by ``handle.result()`` for a request that was cancelled."""


class RequestFailed(Exception):
    """Raised by ``handle.result()`` when an operator of the request raised.

    ``__cause__`` is the operator's original exception with its traceback."""
