"""The Responses API on `cordon serve`'s gateway, driven by the official `openai` Python SDK
(`client.responses.create`, `.stream`, `.retrieve`), with a scripted model upstream: what the
client gets, and what reaches the model server.
"""

import json

import httpx2
import openai
import pytest

from test_gateway import audit, calls, text

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def create(g, as_=None, **kwargs):
    """One `responses.create` as the token `as_`: (session, response)."""
    raw = g.client(as_).responses.with_raw_response.create(model="gpt-cordon", **kwargs)
    return raw.headers["x-cordon-session"], raw.parse()


def user_texts(request):
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "user"]


def test_a_whole_response_that_used_sql_query(gateway):
    steps = [
        calls(("sql_query", {"database": "/db/shop.db", "sql": "SELECT sum(amount) FROM orders"})),
        text("The orders add up to 42.", usage={"prompt_tokens": 30, "completion_tokens": 7}),
    ]
    with gateway(steps) as g:
        session, done = create(g, input="What do the orders add up to?")
        assert done.object == "response" and done.status == "completed"
        assert done.id.startswith(f"resp_{session}_") and done.model == "gpt-cordon"
        assert done.output_text == "The orders add up to 42."
        (message,) = done.output
        assert message.type == "message" and message.role == "assistant"
        assert done.usage.output_tokens >= 7
        assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
        # The tool ran in the sandbox, in this response's session; it is not an output item.
        (record,) = [r for r in audit(g, "sql_query") if r["session"] == session]
        assert record["outcome"]["status"] == "ok"
    first, second = g.model_requests()
    assert user_texts(first) == ["What do the orders add up to?"]
    assert any(m["role"] == "tool" and "42" in m["content"] for m in second["body"]["messages"])


def test_a_streamed_response_with_a_cordon_tool_in_between(gateway):
    steps = [
        {**calls(("run_python", {"code": "6 * 7"})), "content": "Let me compute."},
        text("Six sevens are 42.", chunk=3, usage={"prompt_tokens": 5, "completion_tokens": 6}),
    ]
    with gateway(steps) as g:
        raw = g.client().responses.with_raw_response.create(
            model="gpt-cordon", input="6 times 7?", stream=True
        )
        session = raw.headers["x-cordon-session"]
        events = list(raw.parse())
        types = [e.type for e in events]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert types[:2] == ["response.created", "response.in_progress"]
        assert types[-1] == "response.completed"
        # Each model request's text is a message item of its own, in the API's event order.
        per_item = [
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
        ]
        squeezed = [t for i, t in enumerate(types) if i == 0 or t != types[i - 1]]
        assert squeezed[2:-1] == per_item * 2, types
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        assert len(deltas) >= 4 and "".join(deltas) == "Let me compute.Six sevens are 42."
        done = events[-1].response
        assert [o.content[0].text for o in done.output] == ["Let me compute.", "Six sevens are 42."]
        assert done.output_text == "Let me compute.Six sevens are 42."
        assert done.usage.output_tokens >= 6
        assert done.id == events[0].response.id and done.id.startswith(f"resp_{session}_")
        added = [e.item.id for e in events if e.type == "response.output_item.added"]
        assert added == [o.id for o in done.output]
        (record,) = [r for r in audit(g, "run_python") if r["session"] == session]
        assert record["outcome"]["status"] == "ok"
        # What the stream showed is what the session keeps.
        again = g.client().responses.retrieve(done.id)
        assert [o.model_dump() for o in again.output] == [o.model_dump() for o in done.output]


def test_tool_activity_beside_the_response_when_asked(gateway):
    steps = [
        calls(("run_python", {"code": "1 + 1"})),
        text("Two."),
        calls(("run_python", {"code": "2 + 2"})),
        text("Four."),
        text("Plain."),
    ]
    asked = {"X-Cordon-Tool-Events": "1"}
    with gateway(steps) as g:
        client = g.client()
        done = client.responses.create(model="gpt-cordon", input="1+1?", extra_headers=asked)
        assert done.output_text == "Two."
        events = done.model_extra["cordon"]["events"]
        assert [e["type"] for e in events] == ["tool_started", "tool_result"]
        assert '"result":2' in events[1]["content"]
        streamed = list(
            client.responses.create(
                model="gpt-cordon", input="2+2?", stream=True, extra_headers=asked
            )
        )
        activity = [e.event for e in streamed if e.type == "cordon.tool_activity"]
        assert [e["type"] for e in activity] == ["tool_started", "tool_result"]
        assert streamed[-1].response.output_text == "Four."
        # Without the header, no such events.
        plain = list(client.responses.create(model="gpt-cordon", input="x", stream=True))
        assert not [e for e in plain if e.type.startswith("cordon.")]


def test_the_stream_helper_and_parameters_upstream(gateway):
    schema = {
        "type": "object",
        "properties": {"total": {"type": "integer"}},
        "required": ["total"],
        "additionalProperties": False,
    }
    steps = [text('{"total": 42}', chunk=4)]
    with gateway(steps) as g:
        with g.client().responses.stream(
            model="gpt-cordon",
            instructions="Answer in JSON.",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "The total?"}]}],
            temperature=0.3,
            top_p=0.9,
            max_output_tokens=200,
            text={
                "format": {"type": "json_schema", "name": "total", "schema": schema, "strict": True}
            },
            reasoning={"effort": "low"},
            store=False,
            metadata={"ticket": "7"},
        ) as stream:
            seen = [event.type for event in stream]
            final = stream.get_final_response()
        assert seen[0] == "response.created" and seen[-1] == "response.completed"
        assert final.output_text == '{"total": 42}'
        # The request's settings are echoed as the API does.
        assert final.temperature == 0.3 and final.max_output_tokens == 200
        assert final.instructions == "Answer in JSON." and final.store is False
    (request,) = g.model_requests()
    body = request["body"]
    assert body["temperature"] == 0.3 and body["top_p"] == 0.9
    assert body["max_tokens"] == 200
    assert body["reasoning_effort"] == "low"
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "total", "schema": schema, "strict": True},
    }
    # Taken, not sent: Cordon keeps the session whatever `store` says.
    assert "store" not in body and "metadata" not in body and "text" not in body
    system = body["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("Answer in JSON.")
    assert user_texts(request) == ["The total?"]


def test_previous_response_id_continues_the_session_also_after_a_restart(gateway):
    steps = [text("Hello, Ada."), text("You said your name is Ada."), text("Still Ada.")]
    with gateway(steps) as g:
        session, first = create(g, instructions="Be brief.", input="I am Ada.")
        again, second = create(
            g, instructions="Be brief.", input="What is my name?", previous_response_id=first.id
        )
        assert again == session and second.previous_response_id == first.id
        assert g.api("GET", f"/sessions/{session}")["session"]["turns"] == 2
        # Both responses are read back from the session, after a restart too.
        g.restart()
        client = g.client()
        assert client.responses.retrieve(first.id).output_text == "Hello, Ada."
        kept = client.responses.retrieve(second.id)
        assert kept.status == "completed" and kept.output_text == "You said your name is Ada."
        assert kept.output[0].id == second.output[0].id
        again, _ = create(g, input="And now?", previous_response_id=second.id)
        assert again == session
    last = g.model_requests()[-1]
    assert user_texts(last) == ["I am Ada.", "What is my name?", "And now?"]
    assistant = [m["content"] for m in last["body"]["messages"] if m["role"] == "assistant"]
    assert assistant == ["Hello, Ada.", "You said your name is Ada."]
    assert last["body"]["messages"][0]["content"].startswith("Be brief.")


def test_an_earlier_response_branches_the_conversation(gateway):
    steps = [text("Paris."), text("Lyon."), text("Rome.")]
    with gateway(steps) as g:
        session, first = create(g, input="Capital of France?")
        create(g, input="Second city?", previous_response_id=first.id)
        # Going on from the first answer again: a copy of the session cut after it.
        branch, third = create(g, input="Capital of Italy?", previous_response_id=first.id)
        assert branch != session and third.output_text == "Rome."
        copy = g.api("GET", f"/sessions/{branch}")["session"]
        assert copy["parent"] == session and copy["turns"] == 2
        assert g.api("GET", f"/sessions/{session}")["session"]["turns"] == 2
        # Instructions that are not the session's system prompt cannot change it midway.
        with pytest.raises(openai.BadRequestError) as e:
            create(g, input="x", previous_response_id=third.id, instructions="Be loud.")
        assert e.value.body["param"] == "instructions"
    # The model answering the branch never saw the question it branched away from.
    assert user_texts(g.model_requests()[-1]) == ["Capital of France?", "Capital of Italy?"]


def test_another_tokens_response_is_unknown(gateway):
    with gateway([text("Ann's secret is 4711."), text("Hi.")], tokens=["ann", "bob"]) as g:
        session, secret = create(g, as_="ann", input="Remember 4711.")
        bob = g.client("bob")
        missing = f"resp_{session}_9_0"
        refusals = []
        for rid in (secret.id, missing):
            with pytest.raises(openai.NotFoundError) as e:
                bob.responses.create(
                    model="gpt-cordon", input="What is it?", previous_response_id=rid
                )
            refusals.append(e.value.body["message"].replace(rid, "ID"))
            with pytest.raises(openai.NotFoundError) as e:
                bob.responses.retrieve(rid)
            refusals.append(e.value.body["message"].replace(rid, "ID"))
        # Another token's response and a response that does not exist are refused alike.
        assert refusals[0] == refusals[2] and refusals[1] == refusals[3]
        # Nor can Bob quote Ann's answer into his own conversation.
        with pytest.raises(openai.NotFoundError):
            bob.responses.create(
                model="gpt-cordon",
                input=[
                    {"type": "item_reference", "id": secret.output[0].id},
                    {"role": "user", "content": "Go on."},
                ],
            )
        assert g.api("GET", f"/sessions/{session}", as_="ann")["session"]["turns"] == 1
        # Ann's own id still works.
        assert g.client("ann").responses.retrieve(secret.id).output_text == "Ann's secret is 4711."
    # Bob's refused requests never reached the model.
    assert len(g.model_requests()) == 1


def test_client_function_tools_round_trip(gateway):
    steps = [
        calls(("get_weather", {"city": "Oslo"})),
        text("It is sunny in Oslo."),
        calls(("get_weather", {"city": "Bergen"})),
        text("Rain in Bergen."),
    ]
    with gateway(steps) as g:
        client = g.client()
        session, first = create(g, input="Weather in Oslo?", tools=[WEATHER])
        (call,) = first.output
        assert call.type == "function_call" and call.name == "get_weather"
        assert json.loads(call.arguments) == {"city": "Oslo"} and first.status == "completed"
        # The outputs alone, naming the response that asked for them.
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
        again, second = create(g, previous_response_id=first.id, input=[output], tools=[WEATHER])
        assert again == session and second.output_text == "It is sunny in Oslo."
        assert second.id != first.id
        info = g.api("GET", f"/sessions/{session}")
        assert info["session"]["turns"] == 1
        assert [m["content"] for m in info["messages"] if m["role"] == "tool"] == ["sunny, 21 C"]
        # The same, streamed, sending the whole conversation instead of an id.
        history = [{"role": "user", "content": "Weather in Bergen?"}]
        events = list(
            client.responses.create(model="gpt-cordon", input=history, tools=[WEATHER], stream=True)
        )
        done = events[-1].response
        (call,) = done.output
        kinds = [e.type for e in events if "function_call" in e.type or "output_item" in e.type]
        assert kinds == [
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
        ]
        history += [call.model_dump(exclude_none=True)]
        history += [{"type": "function_call_output", "call_id": call.call_id, "output": "rain"}]
        bergen, rest = create(g, input=history, tools=[WEATHER])
        assert rest.output_text == "Rain in Bergen." and bergen != session
        assert g.api("GET", f"/sessions/{bergen}")["session"]["turns"] == 1
        records = [r for r in audit(g, "get_weather") if r["session"] in (session, bergen)]
        assert {r["plugin"] for r in records} == {"client"} and len(records) == 2
    results = [m for m in g.model_requests()[1]["body"]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in results] == ["sunny, 21 C"]


def test_bad_requests_are_refused_with_the_reason(gateway):
    with gateway([]) as g:
        client = g.client()
        for kwargs, param, fragment in [
            (
                {"tools": [{"type": "web_search"}]},
                "tools[0].type",
                "`web_search` are not supported",
            ),
            ({"conversation": "conv_1"}, "conversation", "previous_response_id"),
            ({"background": True}, "background", "within the request"),
            ({"temperature": 5}, "temperature", "from 0 to 2"),
            ({"max_output_tokens": 0}, "max_output_tokens", "`max_output_tokens` must be"),
            (
                {"tools": [{"type": "function", "name": "sql_query"}]},
                "tools[0].name",
                "clashes with a tool Cordon offers",
            ),
        ]:
            with pytest.raises(openai.BadRequestError) as e:
                client.responses.create(model="gpt-cordon", input="x", **kwargs)
            assert e.value.body["param"] == param, e.value.body
            assert fragment in e.value.body["message"], e.value.body
        with pytest.raises(openai.NotFoundError) as e:
            client.responses.create(model="gpt-4o", input="x")
        assert e.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(
                model="gpt-cordon", input=[{"role": "assistant", "content": "x"}]
            )
        assert "the last input item must be a user message" in e.value.body["message"]
        raw = httpx2.post(
            f"{g.url}/v1/responses",
            headers={"authorization": f"Bearer {g.token}", "content-type": "application/json"},
            content=b"{not json",
        )
        assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"
    assert g.model_requests() == []


def test_an_upstream_failure_before_the_stream_starts(gateway):
    status = {"kind": "status", "status": 503, "message": "overloaded"}
    with gateway([status, status, status]) as g:
        with pytest.raises(openai.InternalServerError) as e:
            list(g.client().responses.create(model="gpt-cordon", input="x", stream=True))
        assert e.value.status_code == 503 and "overloaded" in e.value.body["message"]


def test_a_failure_after_the_stream_started_is_a_failed_response(gateway):
    steps = [
        calls(("run_python", {"code": "1 + 1"})),
        {"kind": "status", "status": 400, "message": "this model cannot do that"},
    ]
    with gateway(steps) as g:
        events = list(g.client().responses.create(model="gpt-cordon", input="x", stream=True))
        assert [e.type for e in events] == [
            "response.created",
            "response.in_progress",
            "response.failed",
        ]
        failed = events[-1].response
        assert failed.status == "failed" and failed.id == events[0].response.id
        assert "this model cannot do that" in failed.error.message
        # Read back, the response says the same.
        again = g.client().responses.retrieve(failed.id)
        assert again.status == "failed" and "this model cannot do that" in again.error.message
