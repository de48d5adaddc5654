"""Clients nobody here wrote, with the settings their users set, against the gateway: LangChain,
openai-agents (its Chat Completions model), and from npm the official `openai` package and the
Vercel AI SDK. Each is checked on the upstream side: what the scripted model received.

Installed by `make gateway-test`: langchain-openai and openai-agents in the private virtualenv,
the npm packages in target/npm-clients."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from test_gateway import calls, text
from test_parameters import SUM, chats

ROOT = Path(__file__).resolve().parents[2]
NPM = ROOT / "target/npm-clients"


def test_langchain_sampling_and_structured_output(gateway):
    langchain_openai = pytest.importorskip("langchain_openai")
    from pydantic import BaseModel

    class Total(BaseModel):
        total: int

    steps = [SUM, text("They add up to 42."), text('{"total": 42}')]
    with gateway(steps) as g:
        llm = langchain_openai.ChatOpenAI(
            model="gpt-cordon",
            base_url=f"{g.url}/v1",
            api_key=g.token,
            temperature=0.1,
            max_tokens=200,
            max_retries=0,
        )
        assert llm.invoke("What do the orders add up to?").content == "They add up to 42."
        shaped = llm.with_structured_output(Total).invoke("Total of the orders, as JSON?")
        assert shaped == Total(total=42)
    sent = chats(g)
    assert len(sent) == 3
    for request in sent:
        assert request["temperature"] == 0.1 and request["max_tokens"] == 200
    assert sent[2]["response_format"]["type"] == "json_schema"
    assert sent[2]["response_format"]["json_schema"]["name"] == "Total"


def test_openai_agents_chat_completions_model_with_its_own_tool(gateway):
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI
    from pydantic import BaseModel

    agents.set_tracing_disabled(True)

    class Report(BaseModel):
        city: str
        total: int

    seen = []

    @agents.function_tool
    def get_city() -> str:
        """The city the orders came from."""
        seen.append("get_city")
        return "Oslo"

    steps = [
        SUM,
        calls(("get_city", {})),
        text('{"city": "Oslo", "total": 42}'),
    ]
    with gateway(steps) as g:
        client = AsyncOpenAI(base_url=f"{g.url}/v1", api_key=g.token, max_retries=0)
        agent = agents.Agent(
            name="orders",
            instructions="Answer about the orders.",
            model=agents.OpenAIChatCompletionsModel(model="gpt-cordon", openai_client=client),
            model_settings=agents.ModelSettings(temperature=0.4, max_tokens=300, top_p=0.8),
            tools=[get_city],
            output_type=Report,
        )
        result = agents.Runner.run_sync(agent, "Where from, and how much?")
        assert result.final_output == Report(city="Oslo", total=42)
    assert seen == ["get_city"], "the agent ran its own tool; Cordon ran sql_query"
    sent = chats(g)
    assert len(sent) == 3
    for request in sent:
        assert (request["temperature"], request["max_tokens"], request["top_p"]) == (0.4, 300, 0.8)
        assert request["response_format"]["type"] == "json_schema"
        names = [t["function"]["name"] for t in request["tools"]]
        assert "get_city" in names and "sql_query" in names
    assert "Answer about the orders." in sent[0]["messages"][0]["content"]
    assert sent[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": sent[2]["messages"][-2]["tool_calls"][0]["id"],
        "content": "Oslo",
    }


def test_npm_openai_and_the_vercel_ai_sdk(gateway):
    node = shutil.which("node")
    if node is None or not (NPM / "node_modules/@ai-sdk/openai").is_dir():
        pytest.skip("node or the npm clients are missing; run `make gateway-test`")
    # ESM finds packages beside the script: run a copy from where they are installed.
    script = NPM / "chat_clients.mjs"
    shutil.copy(Path(__file__).parent / "js/chat_clients.mjs", script)
    answer = "They add up to 42."
    steps = [
        text(answer),
        text('{"total": 42}', usage={"prompt_tokens": 9, "completion_tokens": 4}),
    ]
    steps += [SUM, text(answer), text(answer)]
    with gateway(steps) as g:
        run = subprocess.run(
            [node, str(script)],
            env={**os.environ, "GATEWAY_URL": f"{g.url}/v1", "GATEWAY_TOKEN": g.token},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["openai_whole"] == answer and out["openai_stream"] == '{"total": 42}'
    assert out["openai_stream_usage"]["completion_tokens"] == 4
    assert out["vercel_generate"] == answer and out["vercel_stream"] == answer
    sent = chats(g)
    assert len(sent) == 5
    whole, streamed, generated, generated_after_tool, vercel_streamed = sent
    assert (whole["temperature"], whole["max_tokens"], whole["top_p"]) == (0.2, 256, 0.9)
    assert (whole["stop"], whole["seed"]) == (["\n\n\n"], 11)
    assert streamed["max_tokens"] == 128 and streamed["response_format"] == {"type": "json_object"}
    for request in (generated, generated_after_tool):
        assert (request["temperature"], request["max_tokens"]) == (0.3, 64)
    assert (vercel_streamed["max_tokens"], vercel_streamed["seed"]) == (32, 5)
