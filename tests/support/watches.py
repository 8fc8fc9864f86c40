"""The embedded server's watch settings, changed by the tests that need short ones."""

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.server import ApiServer


def set_watches(
    api: EmbeddedApiServer,
    *,
    history_window: int | None = None,
    bookmark_interval_s: float | None = None,
) -> None:
    """Keep `history_window` events of each resource (from the next one on); send bookmarks every
    `bookmark_interval_s` on the watches opened from now on."""

    def configure(handler: ApiServer) -> None:
        if history_window is not None:
            handler.history_window = history_window
        if bookmark_interval_s is not None:
            handler.bookmark_interval_s = bookmark_interval_s

    api.call(configure)
