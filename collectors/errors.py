"""The collectors' one exception type."""


class CollectorError(ValueError):
    """A source that cannot be read as asked: the message names the file, pid or device and why."""
