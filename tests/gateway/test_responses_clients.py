"""Responses API clients nobody here wrote, unmodified, against `cordon serve`'s gateway with a
scripted model upstream: the OpenAI Agents SDK (`openai-agents`, whose default model is
`OpenAIResponsesModel`) and the Vercel AI SDK (`ai` with `@ai-sdk/openai`, whose default
provider model speaks the Responses API). Each runs its own function tool beside Cordon's
sandboxed ones; the checks are on what reached the model server and what the session holds.
"""

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from test_gateway import audit, calls, text

ROOT = Path(__file__).resolve().parents[2]
NPM_CLIENTS = ROOT / "target/npm-clients"

ORDERS = ("sql_query", {"database": "/db/shop.db", "sql": "SELECT count(*) FROM orders"})


def tool_results(request):
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def user_texts(request):
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "user"]


@pytest.fixture
def agents(gateway):
    """openai-agents pointed at a gateway: (module, start) where start(steps) yields the
    gateway with the SDK's default client set to it."""
    agents = pytest.importorskip(
        "agents", reason="openai-agents is not installed; run `make gateway-test`"
    )
    from contextlib import contextmanager

    import openai

    @contextmanager
    def start(steps):
        with gateway(steps) as g:
            client = openai.AsyncOpenAI(base_url=f"{g.url}/v1", api_key=g.token, max_retries=0)
            agents.set_default_openai_client(client, use_for_tracing=False)
            # The SDK would send traces to OpenAI's servers, which this machine cannot reach.
            agents.set_tracing_disabled(True)
            yield g

    return agents, start


def weather_agent(agents, asked):
    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"sunny in {city}"

    return agents.Agent(
        name="Shop",
        instructions="Answer briefly.",
        model="gpt-cordon",
        tools=[get_weather],
    )


def test_openai_agents_default_model(agents):
    agents, start = agents
    steps = [
        calls(ORDERS, ("get_weather", {"city": "Oslo"})),
        text("Two orders, and sunny in Oslo."),
        text("You asked about Oslo."),
    ]
    asked = []
    with start(steps) as g:
        agent = weather_agent(agents, asked)
        # The SDK's default model for a model name is its Responses model.
        model = agents.models.multi_provider.MultiProvider().get_model("gpt-cordon")
        assert isinstance(model, agents.OpenAIResponsesModel)
        result = agents.Runner.run_sync(agent, "How many orders, and the weather in Oslo?")
        assert result.final_output == "Two orders, and sunny in Oslo."
        assert asked == ["Oslo"]
        # Two requests (the second with the tool's output) were one turn of one session.
        first, second = (r.response_id for r in result.raw_responses)
        session = first.removeprefix("resp_").rsplit("_", 2)[0]
        assert second.startswith(f"resp_{session}_1_")
        info = g.api("GET", f"/sessions/{session}")
        assert info["session"]["turns"] == 1
        assert g.client().responses.retrieve(second).output_text == "Two orders, and sunny in Oslo."
        # The next turn, continued by the last response's id.
        again = agents.Runner.run_sync(
            agent, "Which city did I ask about?", previous_response_id=result.last_response_id
        )
        assert again.final_output == "You asked about Oslo."
        assert g.api("GET", f"/sessions/{session}")["session"]["turns"] == 2
        (sql,) = [r for r in audit(g, "sql_query") if r["session"] == session]
        assert sql["outcome"]["status"] == "ok"
        (weather,) = [r for r in audit(g, "get_weather") if r["session"] == session]
        assert weather["plugin"] == "client" and weather["outcome"]["status"] == "ok"
    requests = g.model_requests()
    assert len(requests) == 3
    # Cordon ran its tool; the agent's own tool's output reached the model as that call's.
    orders, weather = tool_results(requests[1])
    assert json.loads(orders)["rows"] == [[2]] and weather == "sunny in Oslo"
    assert requests[0]["body"]["messages"][0]["content"].startswith("Answer briefly.")
    assert user_texts(requests[2]) == [
        "How many orders, and the weather in Oslo?",
        "Which city did I ask about?",
    ]


def test_openai_agents_streamed(agents):
    agents, start = agents
    steps = [
        calls(("get_weather", {"city": "Bergen"})),
        calls(("run_python", {"code": "6 * 7"})),
        text("Rain in Bergen, and 42.", chunk=3),
    ]
    asked = []
    with start(steps) as g:
        agent = weather_agent(agents, asked)

        async def run():
            result = agents.Runner.run_streamed(agent, "Bergen weather, and 6 times 7?")
            deltas = []
            async for event in result.stream_events():
                if (
                    event.type == "raw_response_event"
                    and event.data.type == "response.output_text.delta"
                ):
                    deltas.append(event.data.delta)
            return result, deltas

        result, deltas = asyncio.run(run())
        assert result.final_output == "Rain in Bergen, and 42."
        assert len(deltas) >= 3 and "".join(deltas) == "Rain in Bergen, and 42."
        assert asked == ["Bergen"]
        session = result.last_response_id.removeprefix("resp_").rsplit("_", 2)[0]
        assert g.api("GET", f"/sessions/{session}")["session"]["turns"] == 1
        (python,) = [r for r in audit(g, "run_python") if r["session"] == session]
        assert python["outcome"]["status"] == "ok"
    last = g.model_requests()[-1]
    assert "sunny in Bergen" in tool_results(last)
    assert any('"result":42' in r for r in tool_results(last)), tool_results(last)


def test_vercel_ai_sdk_default_provider(gateway):
    node = shutil.which("node")
    if node is None or not (NPM_CLIENTS / "node_modules/@ai-sdk/openai").is_dir():
        pytest.skip("node, ai or @ai-sdk/openai is not installed; run `make gateway-test`")
    steps = [
        calls(ORDERS, ("get_weather", {"city": "Oslo"})),
        text("Two orders; sunny in Oslo."),
        text("Sunny tomorrow too."),
        calls(("run_python", {"code": "6 * 7"})),
        text("Six sevens are 42.", chunk=3, usage={"prompt_tokens": 9, "completion_tokens": 5}),
    ]
    with gateway(steps) as g:
        run = subprocess.run(
            [node, ROOT / "tests/gateway/js/responses.mjs"],
            env={
                **os.environ,
                "CORDON_URL": f"{g.url}/v1",
                "CORDON_TOKEN": g.token,
                "CORDON_NPM_CLIENTS": str(NPM_CLIENTS),
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        got = json.loads(run.stdout.strip().splitlines()[-1])
        first = got["first"]
        assert first["text"] == "Two orders; sunny in Oslo."
        assert got["asked"] == ["Oslo"]
        assert first["toolCalls"] == [["get_weather", {"city": "Oslo"}]]
        # Both steps of the app's loop were one turn of one session.
        (session,) = set(first["sessions"])
        assert first["steps"] == 2 and first["responseIds"][0].startswith(f"resp_{session}_1_")
        # The next message went on in that session, the earlier answer named by its item id.
        assert got["second"] == {"text": "Sunny tomorrow too.", "session": session}
        # The SDK named its earlier answer by item id rather than repeating it.
        (third,) = [s["body"] for s in got["sent"] if "And tomorrow?" in json.dumps(s["body"])]
        references = [i["id"] for i in third["input"] if i.get("type") == "item_reference"]
        assert references == [f"msg_{session}_1_1_0"], third["input"]
        assert g.api("GET", f"/sessions/{session}")["session"]["turns"] == 2
        streamed = got["streamed"]
        assert streamed["text"] == "Six sevens are 42." and len(streamed["deltas"]) >= 3
        assert streamed["outputTokens"] >= 5
        assert streamed["id"].startswith(f"resp_{streamed['session']}_1_0")
        (python,) = [r for r in audit(g, "run_python") if r["session"] == streamed["session"]]
        assert python["outcome"]["status"] == "ok"
        (weather,) = [r for r in audit(g, "get_weather") if r["session"] == session]
        assert weather["plugin"] == "client"
    requests = g.model_requests()
    assert len(requests) == 5
    first_request = requests[0]["body"]
    assert first_request["temperature"] == 0.2 and first_request["max_tokens"] == 300
    assert first_request["messages"][0]["content"].startswith("Be brief.")
    assert "sunny in Oslo" in tool_results(requests[1])
    assert user_texts(requests[2]) == ["How many orders, and the weather in Oslo?", "And tomorrow?"]
    assert any('"result":42' in r for r in tool_results(requests[4]))
