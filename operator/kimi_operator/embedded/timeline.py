"""What the embedded API server records for the tests and the benchmark: every state-changing
request in order, with the status it was answered with (the benchmark's clock, also served at
`TIMELINE_PATH` to other processes), and every list and watch with the version it started from."""

from typing import NamedTuple

TIMELINE_PATH = "/_kimi/timeline"


class Write(NamedTuple):
    time: float  # time.monotonic(): shared by the processes of one machine
    method: str
    path: str
    name: str  # of the object written
    code: int = 0  # the HTTP status answered (0: not answered yet)

    @property
    def refused(self) -> bool:
        """Answered with an error: it changed nothing."""
        return self.code >= 300


class Read(NamedTuple):
    """A list or a watch: where a client started reading a collection from."""

    verb: str  # "list" or "watch"
    path: str
    resource_version: str  # as the query names it; "" when it does not
