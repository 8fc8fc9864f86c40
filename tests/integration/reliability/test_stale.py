"""Decisions the world overtook (embedded.stale): a prune's DELETE held up by the API server
while its group is made anew, and the turn holder of a new default image deleted mid-move."""

from contextlib import AbstractContextManager
from typing import Any

from kimi_operator.builders import OperatorDefaults
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.reliability import create_all, deployment
from kimi_operator.embedded.stale import (
    MOVERS,
    MOVERS_NAMESPACE,
    run_holder_deleted,
    run_stale_delete,
)
from kimi_operator.k8s.client import Client
from kimi_operator.runner import OperatorThread, RunConfig


def test_a_held_up_prune_is_refused_and_the_group_made_anew_meanwhile_survives(
    api: EmbeddedApiServer, client: Client, operator: OperatorThread
) -> None:
    report = run_stale_delete(api, client, timeout_s=60)
    assert report.answer == 409  # refused by its preconditions
    assert report.survived
    assert report.converged.exact, report.converged.summary()
    assert operator.failure is None


def test_the_turn_holder_deleted_mid_move_lets_the_next_deployment_move(
    api: EmbeddedApiServer, client: Client, token: str
) -> None:
    def start(image: str) -> AbstractContextManager[Any]:
        defaults = OperatorDefaults(serving_image=image)
        config = RunConfig(
            server=api.url, token=token, resync_interval_s=0.5, workers=2, defaults=defaults,
            namespaces=(MOVERS_NAMESPACE,),
        )  # fmt: skip
        return OperatorThread(config)

    # Another scenario's deployments, never Ready here, as the reliability benchmark leaves them:
    # one of them took the operator-wide turn and kept it, and the waiter never moved (the
    # benchmark timed out) while the scenario shared their operator's namespaces.
    create_all(client, [deployment(f"bystander-{i}") for i in range(2)])
    report = run_holder_deleted(client, start, timeout_s=60)
    assert {report.holder, report.waiter} == set(MOVERS)
