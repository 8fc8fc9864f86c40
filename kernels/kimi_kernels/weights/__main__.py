"""`python -m kimi_kernels.weights --repo R --revision V --dest DIR`: fill a weights cache.

`--plan` instead only resolves: the commit the revision names now, the number of files and their
total size go to the termination message (what a claim for that commit must hold), nothing is
written.

Exit 0 with a complete, verified cache (manifest written); 1 when it could not be made (the reason
is the last log line and in the termination message); 2 for bad arguments. The token is read from
the environment variable `--token-env` names (a Secret in the Job), never from an argument, and no
log line carries it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.utils.tqdm import disable_progress_bars

from kimi_kernels.weights.download import Progress, Request, run
from kimi_kernels.weights.fetch import FetchError, Hub, resolve
from kimi_kernels.weights.layout import DEFAULT_EXCLUDE, DEFAULT_INCLUDE

log = logging.getLogger("kimi_kernels.weights")


class _Redact(logging.Filter):
    """Belt and braces: a log record that would print the token prints *** instead."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.secret in message:
            record.msg, record.args = message.replace(self.secret, "***"), None
        return True


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kimi_kernels.weights", description=__doc__)
    p.add_argument("--repo", required=True, help="Hugging Face repository, owner/name")
    p.add_argument("--revision", default="main", help="branch, tag or commit (default: main)")
    p.add_argument("--dest", type=Path, help="the cache directory (the claim)")
    p.add_argument("--plan", action="store_true", help="resolve and report the size only")
    p.add_argument(
        "--include",
        action="append",
        help=f"file pattern to fetch, repeatable (default: {' '.join(DEFAULT_INCLUDE)})",
    )
    p.add_argument(
        "--exclude",
        action="append",
        help=f"file pattern to skip, repeatable (default: {' '.join(DEFAULT_EXCLUDE)})",
    )
    p.add_argument("--jobs", type=_positive, default=8, help="files fetched at once (default: 8)")
    p.add_argument("--retries", type=_positive, default=6, help="attempts per request (default: 6)")
    p.add_argument(
        "--retry-wait", type=float, default=2.0, help="first wait between attempts, seconds"
    )
    p.add_argument("--endpoint", default=constants.ENDPOINT, help="hub address (HF_ENDPOINT)")
    p.add_argument("--token-env", default="HF_TOKEN", help="environment variable holding the token")
    p.add_argument(
        "--termination-log",
        type=Path,
        help="file for progress and outcome (a pod's /dev/termination-log)",
    )
    return p


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.dest is None and not args.plan:
        parser.error("--dest is required (except with --plan)")
    token = os.environ.get(args.token_env) or None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    if token is not None:
        handler.addFilter(_Redact(token))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    hub_logger = logging.getLogger("huggingface_hub")
    for own in list(hub_logger.handlers):  # its own stderr handler would skip the redaction
        hub_logger.removeHandler(own)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per request otherwise
    disable_progress_bars()
    hub = Hub(args.endpoint.rstrip("/"), token, args.retries, args.retry_wait)
    include = tuple(args.include or DEFAULT_INCLUDE)
    exclude = tuple(args.exclude or DEFAULT_EXCLUDE)
    progress = Progress(args.termination_log)
    try:
        if args.plan:
            progress.target = resolve(hub, args.repo, args.revision, include, exclude)
            progress.phase = "Planned"
            progress.report()
            return 0
        request = Request(args.repo, args.revision, args.dest, include, exclude, args.jobs)
        manifest = run(hub, request, progress)
    except (FetchError, OSError) as error:
        reason = str(error) if token is None else str(error).replace(token, "***")
        progress.phase = "Failed"
        progress.report(reason)
        log.error("weights cache not complete: %s", reason)
        return 1
    log.info(
        "complete: %s@%s, %d files, %d bytes",
        manifest.repo,
        manifest.commit,
        len(manifest.files),
        manifest.total_bytes,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
