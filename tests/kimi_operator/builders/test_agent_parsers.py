"""The agent settings do what they say: the flags a default KimiDeployment renders, read by vLLM
0.33.0's own `serve` parser, select its own `kimi_k3` tool and reasoning parsers, and those turn
Kimi K3's XTML output into structured `tool_calls` and `reasoning`, as its chat completion
serving does (`entrypoints/openai/chat_completion/serving.py`: `ParserManager.get_parser`, one
parser per request, `parse` and `assemble_chat_message_fields`, or streamed, `parse_delta`).
Without them the markup lands in `content`.

The tokenizer is a small one with K3's XTML special tokens, in a stand-in K3 checkpoint
(tests/support/k3_checkpoint.py), loaded as vLLM loads it for K3 (its `kimi_k3` tokenizer mode).
"""

import json
import re
from typing import Any

import pytest

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.vllm_args import leader_args
from tests.support.k3_checkpoint import write_k3_checkpoint
from tests.support.specs import edited
from tests.support.vllm_cli import parse

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_python",
            "description": "Run Python code and return what it prints.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}, "timeout_s": {"type": "number"}},
                "required": ["code"],
            },
        },
    }
]
THOUGHT = "The user wants 17 * 23; running it is safer than guessing."
ANSWER = "Let me compute that."
CODE = "print(17 * 23)"
# What K3 generates for a tool-using turn: think, response and tools channels of special tokens.
K3_OUTPUT = (
    f"<|open|>think<|sep|>{THOUGHT}<|close|>think<|sep|>"
    f"<|open|>response<|sep|>{ANSWER}<|close|>response<|sep|>"
    "<|open|>tools<|sep|>"
    '<|open|>call tool="run_python" index="1"<|sep|>'
    f'<|open|>argument key="code" type="string"<|sep|>{CODE}<|close|>argument<|sep|>'
    '<|open|>argument key="timeout_s" type="number"<|sep|>30<|close|>argument<|sep|>'
    "<|close|>call<|sep|>"
    "<|close|>tools<|sep|>"
)


@pytest.fixture(scope="module")
def k3_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("vllm", reason="vLLM 0.33.0 is installed by `make setup`")
    from vllm.tokenizers.registry import get_tokenizer  # noqa: PLC0415

    checkpoint = write_k3_checkpoint(tmp_path_factory.mktemp("checkpoints") / "k3")
    return get_tokenizer(checkpoint, tokenizer_mode="kimi_k3")


def _serving(vllm_parser: Any, tokenizer: Any, doc: dict[str, Any], stream: bool) -> Any:
    """What vLLM's chat completion serving holds for a tool-offering request, given the leader's
    rendered flags: (the parser class it built at start, --enable-auto-tool-choice, the request)."""
    from vllm.entrypoints.openai.chat_completion.protocol import (  # noqa: PLC0415
        ChatCompletionRequest,
    )
    from vllm.parser.parser_manager import ParserManager  # noqa: PLC0415

    args = parse(vllm_parser, ["/models/weights", *leader_args(KimiDeployment(**doc).spec)[1:]])
    assert args is not None, "vLLM's parser refused the rendered flags"
    auto_tools = args["enable_auto_tool_choice"]
    parser_cls = ParserManager.get_parser(
        tool_parser_name=args["tool_call_parser"],
        reasoning_parser_name=args["reasoning_parser"],
        enable_auto_tools=auto_tools,
        tokenizer=tokenizer,
    )
    request = ChatCompletionRequest(
        model="moonshotai/Kimi-K3",
        messages=[{"role": "user", "content": "What is 17 * 23?"}],
        tools=TOOLS,
        tool_choice="auto",
        stream=stream,
    )
    return parser_cls, auto_tools, request


def _chat(vllm_parser: Any, tokenizer: Any, doc: dict[str, Any]) -> dict[str, Any]:
    """The assistant message vLLM returns for K3_OUTPUT (not streamed)."""
    from vllm.entrypoints.openai.chat_completion.message_assembly import (  # noqa: PLC0415
        assemble_chat_message_fields,
    )
    from vllm.entrypoints.openai.chat_completion.protocol import ChatMessage  # noqa: PLC0415

    parser_cls, auto_tools, request = _serving(vllm_parser, tokenizer, doc, stream=False)
    if parser_cls is None:  # no parser: the text as generated
        reasoning, content, calls = None, K3_OUTPUT, []
    else:
        parser = parser_cls(tokenizer, request.tools, chat_template_kwargs={})
        request = parser.adjust_request(request)
        reasoning, content, calls = parser.parse(K3_OUTPUT, request, enable_auto_tools=auto_tools)
    fields = assemble_chat_message_fields(
        request, reasoning, content, calls, enable_auto_tools=auto_tools, parser_cls=parser_cls
    )
    message = ChatMessage(
        role="assistant",
        content=fields.content,
        reasoning=fields.reasoning,
        tool_calls=fields.tool_calls,
    )
    answer: dict[str, Any] = json.loads(message.model_dump_json())
    return answer


def test_a_default_deployment_returns_structured_tool_calls_and_reasoning(
    vllm_parser: Any, k3_tokenizer: Any
) -> None:
    message = _chat(vllm_parser, k3_tokenizer, edited({}))
    (call,) = message["tool_calls"]
    assert call["type"] == "function"
    assert call["function"]["name"] == "run_python"
    assert json.loads(call["function"]["arguments"]) == {"code": CODE, "timeout_s": 30}
    assert call["id"]
    assert message["reasoning"] == THOUGHT
    assert message["content"] == ANSWER


def test_without_the_agent_settings_the_markup_lands_in_the_content(
    vllm_parser: Any, k3_tokenizer: Any
) -> None:
    doc = edited({"spec.serving": {"toolCalling": False, "reasoning": False}})
    message = _chat(vllm_parser, k3_tokenizer, doc)
    assert "tool_calls" not in message
    assert message["reasoning"] is None
    assert message["content"] == K3_OUTPUT


def test_reasoning_alone_separates_the_thinking_but_returns_no_tool_calls(
    vllm_parser: Any, k3_tokenizer: Any
) -> None:
    message = _chat(vllm_parser, k3_tokenizer, edited({"spec.serving.toolCalling": False}))
    assert message["reasoning"] == THOUGHT
    assert "tool_calls" not in message
    assert '<|open|>call tool="run_python"' in message["content"]


def test_a_default_deployment_streams_the_tool_call_and_the_reasoning_apart(
    vllm_parser: Any, k3_tokenizer: Any
) -> None:
    """As `kimi-operator bench` reads it: K3_OUTPUT generated piece by piece (each special token
    one step), through the parser's streaming path (`parse_delta`)."""
    from vllm.entrypoints.openai.chat_completion.message_assembly import (  # noqa: PLC0415
        keeps_tool_calls,
    )

    parser_cls, auto_tools, request = _serving(vllm_parser, k3_tokenizer, edited({}), stream=True)
    assert keeps_tool_calls(request, enable_auto_tools=auto_tools, parser_cls=parser_cls)
    parser = parser_cls(k3_tokenizer, request.tools, chat_template_kwargs={})
    request = parser.adjust_request(request)
    pieces = [p for p in re.split(r"(<\|open\|>|<\|close\|>|<\|sep\|>)", K3_OUTPUT) if p]
    assert len(pieces) > 30
    deltas = []
    for step, piece in enumerate(pieces):
        ids = k3_tokenizer.encode(piece, add_special_tokens=False)
        delta = parser.parse_delta(
            piece,
            ids,
            request,
            prompt_token_ids=k3_tokenizer.encode("What is 17 * 23?") if step == 0 else None,
            finished=step == len(pieces) - 1,
        )
        if delta is not None:
            deltas.append(delta)
    assert "".join(d.reasoning or "" for d in deltas) == THOUGHT
    assert "".join(d.content or "" for d in deltas) == ANSWER
    (call,) = [c for d in deltas for c in d.tool_calls or ()]
    assert call.index == 0
    assert call.function.name == "run_python"
    assert json.loads(call.function.arguments) == {"code": CODE, "timeout_s": 30}
