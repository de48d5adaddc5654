"""`cordon serve`'s OpenAI-compatible gateway, driven by the official `openai` Python SDK, with
a scripted model upstream.

Run by `make gateway-test` (part of `make test`), or by hand after `make`:

    target/venv/bin/python -m pytest tests/gateway
"""

import sqlite3
import threading
import time

import httpx2
import openai
import pytest


def calls(*calls):
    return {"kind": "tool_calls", "calls": [{"name": n, "arguments": a} for n, a in calls]}


def text(t, **extra):
    return {"kind": "text", "text": t, **extra}


def audit(g, tool):
    return [r for r in g.api("GET", "/audit")["records"] if r.get("tool") == tool]


def audited_calls(g, tool):
    """The audit records of `tool`'s calls, by session and call."""
    return {(r["session"], r["call_id"]): r for r in audit(g, tool)}


def next_audited_call(g, tool, before):
    """The one call of `tool` recorded since `before`, waiting up to 10 s for it."""
    for _ in range(100):
        new = [r for key, r in audited_calls(g, tool).items() if key not in before]
        if new:
            break
        time.sleep(0.1)
    (record,) = new
    return record


def test_an_answer_that_used_sql_query(gateway):
    steps = [
        calls(("sql_query", {"database": "/db/shop.db", "sql": "SELECT sum(amount) FROM orders"})),
        text("The orders add up to 42.", usage={"prompt_tokens": 30, "completion_tokens": 7}),
    ]
    with gateway(steps) as g:
        raw = g.client().chat.completions.with_raw_response.create(
            model="gpt-cordon",
            messages=[{"role": "user", "content": "What do the orders add up to?"}],
        )
        done = raw.parse()
        session = raw.headers["x-cordon-session"]
        assert done.object == "chat.completion" and done.model == "gpt-cordon"
        assert done.choices[0].message.content == "The orders add up to 42."
        assert done.choices[0].finish_reason == "stop"
        assert done.usage.completion_tokens >= 7
        # The tool ran in the sandbox, recorded in the session's audit; its activity is not in
        # the answer's content.
        (record,) = [r for r in audit(g, "sql_query") if r["session"] == session]
        assert record["session"] == session and record["outcome"]["status"] == "ok"
        transcript = g.api("GET", f"/sessions/{session}")["messages"]
        assert any(m["role"] == "tool" and "42" in m["content"] for m in transcript), transcript


def test_a_streamed_answer_that_used_run_python(gateway):
    steps = [
        calls(("run_python", {"code": "6 * 7"})),
        text("Six sevens are 42.", chunk=3, usage={"prompt_tokens": 5, "completion_tokens": 6}),
    ]
    with gateway(steps) as g:
        stream = g.client().chat.completions.create(
            model="gpt-cordon",
            messages=[{"role": "user", "content": "6 times 7?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert all(c.object == "chat.completion.chunk" for c in chunks)
        deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta]
        assert "".join(d for d in deltas if d) == "Six sevens are 42."
        # Text arrives in pieces, as the upstream streamed it.
        assert len([d for d in deltas if d]) >= 3
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 6
        (record,) = audit(g, "run_python")
        assert record["outcome"]["status"] == "ok"
        # Tool activity is not in the stream unless asked for.
        assert all("cordon" not in (c.model_extra or {}) for c in chunks)


def test_tool_activity_beside_the_answer_when_asked(gateway):
    steps = [
        calls(("run_python", {"code": "1 + 1"})),
        text("Two."),
        calls(("run_python", {"code": "2 + 2"})),
        text("Four."),
    ]
    asked = {"X-Cordon-Tool-Events": "1"}
    with gateway(steps) as g:
        client = g.client()
        done = client.chat.completions.create(
            model="gpt-cordon",
            messages=[{"role": "user", "content": "1+1?"}],
            extra_headers=asked,
        )
        assert done.choices[0].message.content == "Two."
        events = done.model_extra["cordon"]["events"]
        assert [e["type"] for e in events] == ["tool_started", "tool_result"]
        assert events[0]["tool"] == "run_python" and '"result":2' in events[1]["content"]
        chunks = list(
            client.chat.completions.create(
                model="gpt-cordon",
                messages=[{"role": "user", "content": "2+2?"}],
                stream=True,
                extra_headers=asked,
            )
        )
        activity = [c.model_extra["cordon"] for c in chunks if "cordon" in (c.model_extra or {})]
        assert [e["type"] for e in activity] == ["tool_started", "tool_result"]
        assert all(c.choices == [] for c in chunks if "cordon" in (c.model_extra or {}))
        text_ = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text_ == "Four."


def test_an_approval_answered_through_the_api_mid_stream(gateway):
    steps = [
        calls(("sql_schema", {"database": "/db/shop.db"})),
        text("The table is orders.", chunk=5),
    ]
    with gateway(steps) as g:
        stream = g.client().chat.completions.create(
            model="gpt-cordon",
            messages=[{"role": "user", "content": "Which tables are there?"}],
            stream=True,
        )
        answered = {}

        def answer():
            for _ in range(200):
                pending = g.api("GET", "/approvals")["pending"]
                if pending:
                    (p,) = pending
                    answered["tool"] = p["tool"]
                    g.api(
                        "POST",
                        f"/approvals/{p['session']}/{p['call_id']}",
                        json={"answer": "yes"},
                    )
                    return
                time.sleep(0.05)

        # The stream waits while the question waits; someone answers it through the API.
        thread = threading.Thread(target=answer)
        thread.start()
        text_ = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        thread.join(30)
        assert answered == {"tool": "sql_schema"}
        assert text_ == "The table is orders."
        (record,) = audit(g, "sql_schema")
        assert record["decision"] == "yes" and record["outcome"]["status"] == "ok", record
        assert record["decided_by"] == "API token `default`"


def test_a_client_sending_the_whole_history_stays_in_one_session(gateway):
    steps = [text("Hello, Ada."), text("You said your name is Ada."), text("Hi.")]
    with gateway(steps) as g:
        client = g.client()
        first = client.chat.completions.with_raw_response.create(
            model="gpt-cordon",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "I am Ada."},
            ],
        )
        session = first.headers["x-cordon-session"]
        answer = first.parse().choices[0].message.content
        second = client.chat.completions.with_raw_response.create(
            model="gpt-cordon",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "I am Ada."},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "What is my name?"},
            ],
        )
        assert second.headers["x-cordon-session"] == session
        assert g.api("GET", f"/sessions/{session}")["session"]["turns"] == 2
        # Another conversation is another session.
        third = client.chat.completions.with_raw_response.create(
            model="gpt-cordon",
            messages=[{"role": "user", "content": "Hi"}],
        )
        assert third.headers["x-cordon-session"] != session


def test_a_restarted_host_continues_the_session_a_history_belongs_to(gateway):
    steps = [text("Hello, Ada."), text("You said your name is Ada.")]
    with gateway(steps) as g:
        first = g.client().chat.completions.with_raw_response.create(
            model="gpt-cordon",
            messages=[{"role": "user", "content": "I am Ada."}],
        )
        session = first.headers["x-cordon-session"]
        answer = first.parse().choices[0].message.content
        g.restart()
        second = g.client().chat.completions.with_raw_response.create(
            model="gpt-cordon",
            messages=[
                {"role": "user", "content": "I am Ada."},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "What is my name?"},
            ],
        )
        assert second.headers["x-cordon-session"] == session
        assert g.api("GET", f"/sessions/{session}")["session"]["turns"] == 2


def test_the_session_header_picks_the_session(gateway):
    with gateway([text("One."), text("Two.")]) as g:
        client = g.client()
        first = client.chat.completions.with_raw_response.create(
            model="gpt-cordon", messages=[{"role": "user", "content": "a"}]
        )
        session = first.headers["x-cordon-session"]
        second = client.chat.completions.with_raw_response.create(
            model="gpt-cordon",
            messages=[{"role": "user", "content": "b"}],
            extra_headers={"X-Cordon-Session": session},
        )
        assert second.headers["x-cordon-session"] == session
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(
                model="gpt-cordon",
                messages=[{"role": "user", "content": "c"}],
                extra_headers={"X-Cordon-Session": "s-nope"},
            )


def test_models_and_an_unknown_model(gateway):
    with gateway([]) as g:
        client = g.client()
        assert [m.id for m in client.models.list()] == ["gpt-cordon"]
        with pytest.raises(openai.NotFoundError) as e:
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "x"}]
            )
        assert e.value.code == "model_not_found" and "`gpt-cordon`" in e.value.body["message"]


def test_upstream_failures(gateway):
    status = {"kind": "status", "status": 503, "message": "overloaded"}
    steps = [
        {**status, "message": "warming up"},
        text("Ready."),
        {"kind": "status", "status": 400, "message": "this model cannot do that"},
        # More 503s than Cordon retries (2 retries: 3 attempts), streamed.
        status,
        status,
        status,
        # A 429 asking to wait longer than Cordon waits (llm.retry.max_retry_after_ms).
        {"kind": "status", "status": 429, "message": "slow down", "retry_after": 30},
    ]
    with gateway(steps) as g:
        client = g.client()
        user = [{"role": "user", "content": "hello"}]
        # A transient failure is retried by Cordon; the client sees the answer.
        done = client.chat.completions.create(model="gpt-cordon", messages=user)
        assert done.choices[0].message.content == "Ready."
        # A request the model server refuses is the gateway's upstream failing.
        with pytest.raises(openai.APIStatusError) as e:
            client.chat.completions.create(model="gpt-cordon", messages=user)
        assert e.value.status_code == 502
        assert "this model cannot do that" in e.value.body["message"], e.value.body
        # After Cordon's retries, a 5xx reaches the client as that 5xx, also when it asked
        # for a stream (nothing was streamed yet).
        with pytest.raises(openai.InternalServerError) as e:
            list(client.chat.completions.create(model="gpt-cordon", messages=user, stream=True))
        assert e.value.status_code == 503 and "overloaded" in e.value.body["message"]
        # A 429 as a 429, with the model server's Retry-After.
        with pytest.raises(openai.RateLimitError) as e:
            client.chat.completions.create(model="gpt-cordon", messages=user)
        assert e.value.response.headers["retry-after"] == "30"
        assert "slow down" in e.value.body["message"]


def test_a_client_that_goes_away_cancels_the_running_tool(gateway):
    steps = [calls(("run_python", {"code": "while True: pass"})), text("never")]
    with gateway(steps) as g:
        before = audited_calls(g, "run_python")
        client = g.client(timeout=httpx2.Timeout(3.0))
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(
                model="gpt-cordon", messages=[{"role": "user", "content": "spin"}]
            )
        # The runaway call is stopped in the sandbox, well before its 30 s time limit (the
        # home, and so the audit log, is shared with the other tests).
        record = next_audited_call(g, "run_python", before)
        # Recorded within seconds of the client's going away: not stopped by the time limit.
        assert record["outcome"]["kind"] == "cancelled", record["outcome"]


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def test_a_client_tool_round_trip(gateway):
    steps = [
        calls(("get_weather", {"city": "Oslo"})),
        text("It is sunny in Oslo."),
    ]
    with gateway(steps) as g:
        client = g.client()
        messages = [{"role": "user", "content": "Weather in Oslo?"}]
        first = client.chat.completions.with_raw_response.create(
            model="gpt-cordon", messages=messages, tools=[WEATHER]
        )
        session = first.headers["x-cordon-session"]
        choice = first.parse().choices[0]
        # The model called the client's tool: the response ends as an upstream's would.
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather"
        assert call.function.arguments == '{"city":"Oslo"}'
        messages.append(choice.message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"})
        second = client.chat.completions.with_raw_response.create(
            model="gpt-cordon", messages=messages, tools=[WEATHER]
        )
        assert second.headers["x-cordon-session"] == session
        assert second.parse().choices[0].message.content == "It is sunny in Oslo."
        # The client's result went to the model as the call's result, in the same turn.
        session_info = g.api("GET", f"/sessions/{session}")
        assert session_info["session"]["turns"] == 1
        results = [m for m in session_info["messages"] if m["role"] == "tool"]
        assert [m["content"] for m in results] == ["sunny, 21 C"]
        (record,) = [r for r in audit(g, "get_weather") if r["session"] == session]
        assert record["plugin"] == "client" and record["outcome"]["status"] == "ok"


def test_a_streamed_answer_mixing_cordon_and_client_tools(gateway):
    steps = [
        calls(
            ("sql_query", {"database": "/db/shop.db", "sql": "SELECT count(*) FROM orders"}),
            ("get_weather", {"city": "Bergen"}),
        ),
        text("Two orders, and rain in Bergen.", chunk=4),
    ]
    with gateway(steps) as g:
        client = g.client()
        messages = [{"role": "user", "content": "Orders and Bergen weather?"}]
        chunks = list(
            client.chat.completions.create(
                model="gpt-cordon", messages=messages, tools=[WEATHER], stream=True
            )
        )
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        calls_seen = [tc for d in deltas if d.tool_calls for tc in d.tool_calls]
        # Only the client's call is handed to the client; Cordon runs its own.
        assert [c.function.name for c in calls_seen] == ["get_weather"]
        call = calls_seen[0]
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "rain"})
        rest = list(
            client.chat.completions.create(
                model="gpt-cordon", messages=messages, tools=[WEATHER], stream=True
            )
        )
        text_ = "".join(c.choices[0].delta.content or "" for c in rest if c.choices)
        assert text_ == "Two orders, and rain in Bergen."
        assert rest[-1].choices[0].finish_reason == "stop"
        assert [r["outcome"]["status"] for r in audit(g, "sql_query")][-1] == "ok"


def test_a_stream_closed_mid_turn_cancels_the_running_tool(gateway):
    steps = [calls(("run_python", {"code": "while True: pass"})), text("never")]
    with gateway(steps) as g:
        before = audited_calls(g, "run_python")
        stream = g.client().chat.completions.create(
            model="gpt-cordon",
            messages=[{"role": "user", "content": "spin, streamed"}],
            stream=True,
        )
        first = next(iter(stream))
        assert first.choices[0].delta.role == "assistant"
        time.sleep(0.5)  # the tool is spinning in the sandbox now
        stream.close()
        record = next_audited_call(g, "run_python", before)
        assert record["outcome"]["kind"] == "cancelled", record["outcome"]


def test_bad_requests_are_refused_with_the_reason(gateway):
    with gateway([]) as g:
        client = g.client()
        user = [{"role": "user", "content": "x"}]
        for kwargs, fragment in [
            ({"n": 2}, "one answer per request"),
            ({"temperature": 7}, "`temperature` must be a number from 0 to 2"),
            (
                {"tool_choice": {"type": "function", "function": {"name": "nope"}}},
                "`nope`, which is not a tool of this request",
            ),
            (
                {"tools": [{"type": "function", "function": {"name": "sql_query"}}]},
                "clashes with a tool Cordon offers",
            ),
        ]:
            with pytest.raises(openai.BadRequestError) as e:
                client.chat.completions.create(model="gpt-cordon", messages=user, **kwargs)
            assert fragment in e.value.body["message"], e.value.body
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model="gpt-cordon", messages=[{"role": "assistant", "content": "x"}]
            )
        assert "the last message must be the user's" in e.value.body["message"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{g.url}/v1", api_key="wrong", max_retries=0).models.list()
        raw = httpx2.post(
            f"{g.url}/v1/chat/completions",
            headers={"authorization": f"Bearer {g.token}", "content-type": "application/json"},
            content=b"{not json",
        )
        assert raw.status_code == 400
        assert raw.json()["error"]["type"] == "invalid_request_error"
        # The server goes on serving.
        assert [m.id for m in client.models.list()] == ["gpt-cordon"]


def test_the_database_was_only_read(home):
    with sqlite3.connect(home.db / "shop.db") as db:
        assert db.execute("SELECT count(*) FROM orders").fetchone() == (2,)
