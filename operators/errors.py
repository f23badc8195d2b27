"""The operator library's errors: one-line messages a user can act on."""

from bobox_sched.core.errors import BoboxError


class DataError(BoboxError):
    """Bad or missing TPC-H data, or a failed generator (one-line message)."""


__all__ = ["DataError"]
