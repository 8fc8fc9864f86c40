"""What `k8s` raises. Whether and when to retry is not decided here: that is the controller's
(`controller/retry.py`); these say only what happened."""


class KubernetesError(Exception):
    """A request the API server refused or did not answer, or a child the operator may not take."""


class ApiError(KubernetesError):
    """The API server answered `code` (0: no answer in time, or no connection), perhaps with a
    Retry-After (429, 503) in seconds."""

    def __init__(self, message: str, *, code: int, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after_s = retry_after_s


class NotOwned(KubernetesError):
    """A child's name is taken by an object this KimiDeployment does not own."""


class NotLeading(KubernetesError):
    """A write refused by the client itself: this replica does not hold a fresh Lease (it lost
    the leadership, or cannot tell that it still has it), so another may be leading."""


class OwnerTerminating(KubernetesError):
    """A child not created again nor adopted: its KimiDeployment, read afresh, is gone or being
    deleted (the reconcile's copy was older)."""
