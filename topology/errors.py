"""The one exception type of the topology package: bad input, not a bug."""


class TopologyError(Exception):
    """A topology root, node, CPU or allocation request that cannot be honoured.

    The CLI prints it as a one-line error and exits with status 2."""
