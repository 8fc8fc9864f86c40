"""The recipe settings the operator adopts without owning them (docs/serving.md): rendered by
default, left out when spec.engineArgs sets the same option in any spelling vLLM accepts, so that
vLLM 0.33.0's own parser reads the user's value and never the option twice."""

from typing import Any

import pytest

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.vllm_args import leader_args, worker_args
from tests.support.pods import expand
from tests.support.specs import edited
from tests.support.vllm_cli import parse

REFS = {"LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_WORKER_INDEX": "1"}  # as Kubernetes fills them in


def _parsed(vllm_parser: Any, engine_args: list[str]) -> list[dict[str, Any]]:
    """What vLLM's parser reads from the leader's and the workers' rendered arguments."""
    spec = KimiDeployment(**edited({"spec.engineArgs": engine_args})).spec
    out = []
    for args in (leader_args(spec), worker_args(spec)):
        values = parse(vllm_parser, [expand(a, REFS) for a in args])
        assert values is not None, args
        out.append(values)
    return out


def test_a_default_deployment_gets_the_adopted_recipe_settings(vllm_parser: Any) -> None:
    for values in _parsed(vllm_parser, []):
        assert values["trust_remote_code"] is True
        assert values["max_num_batched_tokens"] == 8192
        assert values["language_model_only"] is True
        assert values["enable_auto_tool_choice"] is True
        assert values["tool_call_parser"] == "kimi_k3"
        assert values["reasoning_parser"] == "kimi_k3"


@pytest.mark.parametrize(
    ("engine_args", "dest", "value"),
    [
        (["--no-trust-remote-code"], "trust_remote_code", False),
        (["--max-num-batched-tokens=16k"], "max_num_batched_tokens", 16000),  # vLLM: k = 1000
        (["--max-num-batched-token", "4096"], "max_num_batched_tokens", 4096),  # abbreviated
        (["--max_num_batched_tokens", "2048"], "max_num_batched_tokens", 2048),
    ],
)
def test_engine_args_that_set_one_replace_the_operators_value(
    vllm_parser: Any, engine_args: list[str], dest: str, value: object
) -> None:
    spec = KimiDeployment(**edited({"spec.engineArgs": engine_args})).spec
    for values in _parsed(vllm_parser, engine_args):
        assert values[dest] == value
    for args in (leader_args(spec), worker_args(spec)):
        user = args[len(args) - len(engine_args) :]
        assert user == engine_args  # the user's, last and unchanged
        operators = args[: len(args) - len(engine_args)]
        spelled = {"trust_remote_code": "trust-remote-code", "max_num_batched_tokens": "batched"}
        assert not any(spelled[dest] in a for a in operators), operators
