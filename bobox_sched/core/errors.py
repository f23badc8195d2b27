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


class OperatorError(BoboxError):
    """An operator broke the runtime's protocol: sent on a port it had closed, sent
    something that is not a :class:`~bobox_sched.core.packet.Packet`, named a port it does
    not have. Raised inside the operator's run, so it fails the operator's request like
    any exception of the operator (``handle.failed_operator`` names the operator, and so
    does the message)."""


class OperatorStalled(OperatorError):
    """An operator kept being run because its input buffer was not empty, and never took
    a packet or sent one (see ``bobox_sched.core.task``: a run that makes no progress). Its
    request fails with this error; the message names the operator and the input port it
    left unread."""


class SchedulerWarning(RuntimeWarning):
    """Something went wrong at run time that the scheduler survived: a policy's
    ``next_task`` raised (the worker backs off and retries), the balancer or the elastic
    controller raised, a thread did not end at shutdown. Problems with pinning threads
    or placing memory are :class:`topology.PinningWarning` instead."""
