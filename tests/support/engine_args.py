"""Which engineArgs elements the refusal groups refuse: the tests' question (the operator asks
the groups one by one, api/engine_args.py)."""

from collections.abc import Iterable

from kimi_operator.api.engine_args import ENGINE_ARG_REFUSALS, ForbiddenFlags


def refused_engine_args(args: Iterable[str]) -> list[tuple[str, ForbiddenFlags]]:
    """Every refused element with the group that refuses it."""
    args = list(args)
    return [(a, group) for group in ENGINE_ARG_REFUSALS for a in group.refused(args)]
