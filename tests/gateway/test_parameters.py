"""What clients set reaches the model: sampling and output parameters, `tool_choice`, image
parts, the operator's bounds, and the routes forwarded to the model server. Every check is on
the upstream side, in the scripted model's record of what it received."""

import base64
import json

import httpx2
import openai
import pytest

from test_gateway import calls, text

USER = [{"role": "user", "content": "What do the orders add up to?"}]
SUM = calls(("sql_query", {"database": "/db/shop.db", "sql": "SELECT sum(amount) FROM orders"}))


def chats(g):
    """The chat completion requests the model received (after the gateway stopped)."""
    return [r["body"] for r in g.model_requests() if not r.get("path")]


# The body the Continue extension sends (OpenAI JS SDK, agent mode off): `max_tokens` always.
CONTINUE_BODY = {
    "max_tokens": 4096,
    "messages": [
        {
            "content": "<important_rules>\n  You are in agent mode.\n</important_rules>",
            "role": "system",
        },
        {"content": "What do the orders add up to?", "role": "user"},
    ],
    "model": "gpt-cordon",
    "stream": True,
}


def test_continues_exact_request_body(gateway):
    with gateway([SUM, text("They add up to 42.", chunk=4)]) as g:
        with httpx2.stream(
            "POST",
            f"{g.url}/v1/chat/completions",
            headers={
                "authorization": f"Bearer {g.token}",
                "content-type": "application/json",
                "user-agent": "OpenAI/JS 4.76.0",
            },
            json=CONTINUE_BODY,
            timeout=60,
        ) as r:
            assert r.status_code == 200, r.read()
            body = "".join(r.iter_text())
    assert body.rstrip().endswith("data: [DONE]")
    chunks = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
    said = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert said == "They add up to 42."
    sent = chats(g)
    assert len(sent) == 2
    for request in sent:
        assert request["max_tokens"] == 4096
        assert "You are in agent mode." in request["messages"][0]["content"]


def test_every_standard_parameter_reaches_the_model_with_each_request_of_the_turn(gateway):
    schema = {
        "type": "object",
        "properties": {"total": {"type": "integer"}},
        "required": ["total"],
        "additionalProperties": False,
    }
    parameters = {
        "temperature": 0.25,
        "top_p": 0.5,
        "max_completion_tokens": 333,
        "stop": ["\n\n", "END"],
        "seed": 1234,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.25,
        "logit_bias": {"50256": -100},
        "logprobs": True,
        "top_logprobs": 2,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "total", "schema": schema, "strict": True},
        },
        "parallel_tool_calls": False,
        "reasoning_effort": "low",
    }
    allow = '[gateway.parameters]\nallow = ["top_k", "min_p"]\n'
    with gateway([SUM, text('{"total": 42}')], config=allow) as g:
        done = g.client().chat.completions.create(
            model="gpt-cordon",
            messages=USER,
            store=False,
            metadata={"ticket": "T-1"},
            extra_body={"top_k": 40, "min_p": 0.05},
            **parameters,
        )
        assert done.choices[0].message.content == '{"total": 42}'
    sent = chats(g)
    assert len(sent) == 2, "a tool call, then the answer"
    for request in sent:
        for name, value in parameters.items():
            # `[llm] max_tokens_field` is `max_tokens` by default: the upstream's spelling.
            name = "max_tokens" if name == "max_completion_tokens" else name
            assert request[name] == value, (name, request)
        assert "max_completion_tokens" not in request
        assert request["top_k"] == 40 and request["min_p"] == 0.05
        # Taken, not sent: Cordon keeps the session whatever `store` says.
        assert "store" not in request and "metadata" not in request
        assert request["model"] == "scripted"


def test_tool_choice_applies_to_the_first_request_of_the_turn(gateway):
    lookup = {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
    }
    steps = [SUM, text("42."), SUM, text("42 again."), text("Plain.")]
    steps += [calls(("lookup", {})), text("Looked up.")]
    with gateway(steps) as g:
        client = g.client()
        for choice in ["required", {"type": "function", "function": {"name": "sql_query"}}]:
            client.chat.completions.create(model="gpt-cordon", messages=USER, tool_choice=choice)
        client.chat.completions.create(model="gpt-cordon", messages=USER, tool_choice="none")
        forced = {"type": "function", "function": {"name": "lookup"}}
        done = client.chat.completions.create(
            model="gpt-cordon", messages=USER, tools=[lookup], tool_choice=forced
        )
        assert done.choices[0].finish_reason == "tool_calls"
        # The turn goes on with the result (and with `auto`): the model may answer now.
        call = done.choices[0].message.tool_calls[0]
        rest = client.chat.completions.create(
            model="gpt-cordon",
            messages=[
                *USER,
                done.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "found"},
            ],
            tools=[lookup],
            tool_choice=forced,
        )
        assert rest.choices[0].message.content == "Looked up."
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model="gpt-cordon",
                messages=USER,
                tool_choice={"type": "function", "function": {"name": "lookup"}},
            )
        assert "`lookup`, which is not a tool of this request" in e.value.body["message"]
    sent = chats(g)
    assert sent[0]["tool_choice"] == "required" and "tool_choice" not in sent[1]
    named = {"type": "function", "function": {"name": "sql_query"}}
    assert sent[2]["tool_choice"] == named and "tool_choice" not in sent[3]
    # `none`: the model is offered no tools at all, so any upstream answers in text.
    assert "tools" not in sent[4] and "tool_choice" not in sent[4]
    assert sent[5]["tool_choice"] == forced
    assert "lookup" in [t["function"]["name"] for t in sent[5]["tools"]]
    assert "tool_choice" not in sent[6]


def test_image_parts_reach_the_model_as_sent(gateway):
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
    parts = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
    ]
    with gateway([text("A black square."), text("Still black.")]) as g:
        client = g.client()
        history = [{"role": "user", "content": parts}]
        first = client.chat.completions.with_raw_response.create(
            model="gpt-cordon", messages=history
        )
        history += [
            {"role": "assistant", "content": first.parse().choices[0].message.content},
            {"role": "user", "content": "Sure?"},
        ]
        second = client.chat.completions.with_raw_response.create(
            model="gpt-cordon", messages=history
        )
        # The history with its image is the session's: the same session goes on.
        assert second.headers["x-cordon-session"] == first.headers["x-cordon-session"]
        # What the model server would fetch or look up itself is refused: a URL, a file id.
        for part, param in [
            (
                {"type": "image_url", "image_url": {"url": "http://169.254.169.254/latest"}},
                "messages[0].content[0].image_url",
            ),
            (
                {"type": "file", "file": {"file_id": "file-operators"}},
                "messages[0].content[0].file.file_id",
            ),
        ]:
            with pytest.raises(openai.BadRequestError) as e:
                client.chat.completions.create(
                    model="gpt-cordon", messages=[{"role": "user", "content": [part]}]
                )
            assert e.value.param == param, e.value.body
    sent = chats(g)
    assert len(sent) == 2
    assert sent[0]["messages"][-1]["content"] == parts
    assert sent[1]["messages"][1]["content"] == parts


BOUNDS = """
[gateway.parameters]
max_tokens = 100
temperature = [0.0, 1.0]
drop = ["logit_bias"]
refuse = ["seed"]
"""


def test_the_operator_bounds_what_clients_set(gateway):
    with gateway([text("ok")], config=BOUNDS) as g:
        client = g.client()
        client.chat.completions.create(
            model="gpt-cordon",
            messages=USER,
            max_tokens=4096,
            temperature=1.8,
            logit_bias={"1": 5},
        )
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="gpt-cordon", messages=USER, seed=1)
        assert e.value.code == "parameter_refused" and e.value.param == "seed"
        assert "[gateway.parameters] refuse" in e.value.body["message"]
        # A model server's own parameter not in `allow`: llama.cpp's `n_predict` would
        # outrank the ceiling on `max_tokens`.
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model="gpt-cordon", messages=USER, extra_body={"n_predict": -1}
            )
        assert e.value.code == "parameter_not_allowed" and e.value.param == "n_predict"
        assert "[gateway.parameters] allow" in e.value.body["message"]
    (sent,) = chats(g)
    assert sent["max_tokens"] == 100 and sent["temperature"] == 1.0
    assert "logit_bias" not in sent and "n_predict" not in sent


def test_errors_under_v1_are_openais_with_a_hint(gateway):
    with gateway([]) as g:
        wrong = openai.OpenAI(base_url=f"{g.url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as e:
            wrong.chat.completions.create(model="gpt-cordon", messages=USER)
        assert e.value.code == "invalid_api_key"
        assert "serve-token" in e.value.body["message"]
        client = g.client()
        assert client.models.retrieve("gpt-cordon").id == "gpt-cordon"
        with pytest.raises(openai.NotFoundError) as e:
            client.models.retrieve("gpt-4o")
        assert e.value.code == "model_not_found" and "`gpt-cordon`" in e.value.body["message"]
        r = httpx2.get(f"{g.url}/v1/files", headers={"authorization": f"Bearer {g.token}"})
        assert r.status_code == 404
        error = r.json()["error"]
        assert error["code"] == "unknown_url" and "/v1/chat/completions" in error["message"]


def test_completions_and_embeddings_are_forwarded_to_the_model_server(gateway):
    models = '"embedder" = "nomic-embed-text"\n'
    bounds = "[gateway.parameters]\nmax_tokens = 50\n"
    with gateway([], models=models, config=bounds) as g:
        client = g.client()
        done = client.completions.create(model="gpt-cordon", prompt="abc", max_tokens=5)
        assert done.choices[0].text == "cba"
        client.completions.create(model="gpt-cordon", prompt="unbounded")
        vectors = client.embeddings.create(model="embedder", input=["a", "héllo"])
        assert [d.embedding for d in vectors.data] == [[1.0, 1.0], [5.0, 6.0]]
        # Only the models the gateway offers: none other on the operator's key.
        with pytest.raises(openai.NotFoundError) as e:
            client.embeddings.create(model="text-embedding-3-large", input="a")
        assert e.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="gpt-cordon", prompt="x", n=5)
        assert e.value.param == "n"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{g.url}/v1", api_key="no", max_retries=0).embeddings.create(
                model="embedder", input="a"
            )
    forwarded = [r for r in g.model_requests() if r.get("path")]
    paths = [r["path"] for r in forwarded]
    assert paths == ["/v1/completions", "/v1/completions", "/v1/embeddings"]
    # A gateway model name goes upstream as the model it stands for.
    assert forwarded[0]["body"]["model"] == "scripted"
    assert forwarded[0]["body"]["prompt"] == "abc" and forwarded[0]["body"]["max_tokens"] == 5
    # The operator's ceiling bounds a request that set no limit.
    assert forwarded[1]["body"]["max_tokens"] == 50
    assert forwarded[2]["body"]["model"] == "nomic-embed-text"
    # The upstream sees Cordon's own key (none here), never the client's token.
    assert all(g.token not in (r.get("authorization") or "") for r in forwarded)
