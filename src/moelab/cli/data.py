"""Sub-commands: not yet written."""


def register(subparsers) -> None:
    """Add this module's sub-commands."""
