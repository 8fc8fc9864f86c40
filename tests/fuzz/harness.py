"""Run one hostile input through the CLI (in-process) or the validator and classify what happened.

An outcome is bad when the input crashed (an exception escaped), printed a traceback, produced a
rejection that names no field, or was accepted and rendered into a pod that runs a shell over user
text or holds host privileges.
"""

import contextlib
import io
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from kimi_operator.api.validation import UnreadableDocument, check_document
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.cli import main
from kimi_operator.embedded.upstream import SAFE_LOADER
from tests.support.pods import privilege_problems, shell_problems

Verdict = Literal["accepted", "rejected", "crash"]
# A problem's path: `spec.env[0].name`; a key that is no identifier quoted: `spec["a b"]`.
_QUOTED = r'\["([^"\\]|\\.)*"\]'
PATH = re.compile(rf"([A-Za-z0-9_]+|{_QUOTED})(\.[A-Za-z0-9_]+|\[\d+\]|{_QUOTED})*")
# `LABEL: PATH: what (got ...; allowed: ...)` or `LABEL: PATH: what (allowed: ...)`.
PROBLEM_LINE = re.compile(rf"<stdin>(\[\d+\])?: (?P<path>{PATH.pattern}): .+\(.*allowed: .*\)")
OK_LINE = re.compile(
    r"<stdin>(\[\d+\])?: (valid|warning: spec\.\S+: .+|skipped \(.+\): not a KimiDeployment)"
)
ERROR_LINE = re.compile(r"error: <stdin>(\[\d+\])?: \S.*")


@dataclass
class Outcome:
    verdict: Verdict
    seconds: float
    traceback: bool = False
    # Lines or messages that break the rules above (empty when all is well).
    bad: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _stdio(data: bytes) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        sys.stdin = saved


def run_cli(argv: list[str], data: bytes) -> tuple[int, str, str]:
    """`kimi-operator ARGV` with `data` on stdin, in this process: (exit code, stdout, stderr)."""
    with _stdio(data) as (out, err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def check_text(data: bytes) -> Outcome:
    """`kimi-operator validate -`, then `render -` when valid, on one input file."""
    start = time.perf_counter()
    try:
        code, out, err = run_cli(["validate", "-"], data)
        rendered = run_cli(["render", "-"], data) if code == 0 else None
    except Exception as error:  # any escape is the finding
        return Outcome("crash", time.perf_counter() - start, bad=[repr(error)])
    seconds = time.perf_counter() - start
    traceback = "Traceback" in out + err
    bad = [line for line in out.splitlines() if not PROBLEM_LINE.fullmatch(line)]
    bad = [line for line in bad if not OK_LINE.fullmatch(line)]
    bad += [line for line in err.splitlines() if not ERROR_LINE.fullmatch(line)]
    if code not in (0, 1, 2) or (code != 0 and not (out + err).strip()):
        bad.append(f"exit code {code} with output {out + err!r}")
    if rendered is not None:
        bad += _rendered_problems(rendered, data)
    verdict: Verdict = "accepted" if code == 0 else "rejected"
    return Outcome(verdict, seconds, traceback, bad)


def _rendered_problems(rendered: tuple[int, str, str], data: bytes) -> list[str]:
    code, out, err = rendered
    if code != 0:
        return [f"render refused what validate accepted: {err!r}"]
    children = list(yaml.load_all(out, Loader=SAFE_LOADER))
    docs = [d for d in yaml.load_all(data.decode("utf-8"), Loader=SAFE_LOADER) if d is not None]
    problems = []
    for doc in docs:
        deployment = check_document(doc).deployment
        assert deployment is not None
        problems += shell_problems(children, deployment)
    return problems + privilege_problems(children)


def check_value(doc: Any) -> Outcome:
    """`check_document` on an already parsed document, and the children of an accepted one."""
    start = time.perf_counter()
    try:
        report = check_document(doc)
    except UnreadableDocument as error:
        message = str(error)
        bad = [] if message and "\n" not in message else [f"unclear refusal: {message!r}"]
        return Outcome("rejected", time.perf_counter() - start, bad=bad)
    except Exception as error:
        return Outcome("crash", time.perf_counter() - start, bad=[repr(error)])
    seconds = time.perf_counter() - start
    bad = [f"no field named: {p}" for p in report.problems if not PATH.fullmatch(p.path)]
    bad += [f"message breaks the line: {p}" for p in report.problems if "\n" in str(p)]
    if report.deployment is None:
        return Outcome("rejected", seconds, bad=bad)
    children = build_children(report.deployment, OperatorDefaults())
    bad += shell_problems(children, report.deployment) + privilege_problems(children)
    return Outcome("accepted", seconds, bad=bad)


def check(case: tuple[str, Any]) -> Outcome:
    """One case of `strategies.INPUTS`."""
    kind, payload = case
    return check_text(payload) if kind == "cli" else check_value(payload)
