"""The one error type the connector raises for bad options, unreachable clusters and data loss."""


class DmSourceError(ValueError):
    """A problem the user can act on; the message names the option or partition involved."""
