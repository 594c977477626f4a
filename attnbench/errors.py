"""The one exception type for mistakes a user can fix: the CLI prints it as one line, exit 2."""


class UsageError(ValueError):
    """A bad option, name, path or input file. Raised before any work when possible."""
