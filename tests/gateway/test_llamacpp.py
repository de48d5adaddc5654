"""The gateway in front of a real model server: llama.cpp's own OpenAI-compatible server with
SmolLM2-135M, driven by the official `openai` SDK. The model is small: these tests check the
wire format end to end (streamed deltas, usage, finish reasons, sessions), not what it says.
"""

import json


def test_a_streamed_answer_from_llama_cpp(real_gateway):
    g = real_gateway
    raw = g.client(timeout=120).chat.completions.with_raw_response.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Say hello in five words."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    session = raw.headers["x-cordon-session"]
    chunks = list(raw.parse())
    assert chunks[0].choices[0].delta.role == "assistant"
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta]
    pieces = [d for d in deltas if d]
    assert len(pieces) >= 2, chunks
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    # What was streamed is what the session recorded as the answer.
    messages = g.api("GET", f"/sessions/{session}")["messages"]
    assert messages[-1]["role"] == "assistant"
    assert messages[-1]["content"] == "".join(pieces)


def test_a_whole_answer_and_the_next_turn_in_the_same_session(real_gateway):
    client = real_gateway.client(timeout=120)
    history = [{"role": "user", "content": "Name a colour."}]
    first = client.chat.completions.with_raw_response.create(model="smollm2", messages=history)
    done = first.parse()
    assert done.object == "chat.completion"
    # LLAMA_CONFIG's `max_tokens = 24` may cut the answer, and the gateway says when it did.
    cut = done.usage.completion_tokens >= 24
    assert done.choices[0].finish_reason == ("length" if cut else "stop"), done
    assert done.choices[0].message.content
    assert done.usage.prompt_tokens > 0 and done.usage.completion_tokens > 0
    history += [
        {"role": "assistant", "content": done.choices[0].message.content},
        {"role": "user", "content": "Name another."},
    ]
    second = client.chat.completions.with_raw_response.create(model="smollm2", messages=history)
    assert second.headers["x-cordon-session"] == first.headers["x-cordon-session"]
    assert second.parse().choices[0].message.content


def test_a_clients_parameters_act_on_llama_cpp(real_gateway):
    """What arrives upstream, seen through what llama.cpp does with it: `max_tokens` cuts the
    answer (and the gateway says so), `response_format` constrains it to the schema."""
    client = real_gateway.client(timeout=120)
    count = [{"role": "user", "content": "Count from one to fifty, in words."}]
    cut = client.chat.completions.create(
        model="smollm2", messages=count, max_tokens=3, temperature=0.0, seed=7
    )
    assert cut.choices[0].finish_reason == "length"
    assert 0 < cut.usage.completion_tokens <= 3
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    shaped = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "What is two plus two? Answer in JSON."}],
        max_completion_tokens=30,
        response_format={"type": "json_schema", "json_schema": {"name": "sum", "schema": schema}},
    )
    assert shaped.choices[0].finish_reason == "stop", shaped
    assert isinstance(json.loads(shaped.choices[0].message.content)["answer"], int)


def test_a_response_cut_at_max_output_tokens_is_incomplete(real_gateway):
    client = real_gateway.client(timeout=120)
    cut = client.responses.create(
        model="smollm2", input="Count from one to fifty, in words.", max_output_tokens=3
    )
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert 0 < cut.usage.output_tokens <= 3 and cut.output_text
