"""The gateway in front of a real model server: llama.cpp's own OpenAI-compatible server with
SmolLM2-135M, driven by the official `openai` SDK. The model is small: these tests check the
wire format end to end (streamed deltas, usage, finish reasons, sessions), not what it says.
"""


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
    assert done.object == "chat.completion" and done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.content
    assert done.usage.prompt_tokens > 0 and done.usage.completion_tokens > 0
    history += [
        {"role": "assistant", "content": done.choices[0].message.content},
        {"role": "user", "content": "Name another."},
    ]
    second = client.chat.completions.with_raw_response.create(model="smollm2", messages=history)
    assert second.headers["x-cordon-session"] == first.headers["x-cordon-session"]
    assert second.parse().choices[0].message.content
