"""The one exception type users see.

Anything raised as ``MoelabError`` is a problem with the user's input (a bad config value, a
missing file, a corrupt cache); the CLI prints its message on one line and exits with code 2.
Everything else is a bug and keeps its traceback.
"""


class MoelabError(Exception):
    """A user-facing error: the message names the bad value and what is allowed."""


class ConfigError(MoelabError):
    """An invalid configuration key or value."""
