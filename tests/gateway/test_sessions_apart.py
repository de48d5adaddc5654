"""Attack tests: the gateway never puts one requester's messages into another's session.

A deterministic model gives equal answers to equal questions, so two users who open with the
same question send the same history next; an app with a fixed opening does the same; and a
user who edits an earlier message sends a history that an existing session passed through.
Each must get a session of its own, seeded from what it sent, and a standing answer
(`always`) must stay with the session and requester it was given for.
"""

import threading
import time

import openai
import pytest

from test_gateway import audit, calls, text

HI = [{"role": "user", "content": "Hi"}]


def send(g, as_, messages, **kwargs):
    """One request as the token `as_`: (session, answer)."""
    r = g.client(as_).chat.completions.with_raw_response.create(
        model="gpt-cordon", messages=messages, **kwargs
    )
    return r.headers["x-cordon-session"], r.parse().choices[0].message.content


def user_texts(request):
    """The user messages of one request the scripted model received."""
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "user"]


def test_two_tokens_with_the_same_opening_keep_their_own_sessions(gateway):
    steps = [text("Hello."), text("Hello."), text("Noted."), text("I cannot tell.")]
    with gateway(steps, tokens=["ann", "bob"]) as g:
        ann, hello = send(g, "ann", HI)
        bob, hello_too = send(g, "bob", HI)
        assert hello == hello_too == "Hello."
        assert ann != bob
        ann_next = [*HI, {"role": "assistant", "content": hello}]
        # Ann goes on in her session, even though Bob's answer ended at the same history.
        again, _ = send(g, "ann", [*ann_next, {"role": "user", "content": "My PIN is 4711."}])
        assert again == ann
        # Bob goes on in his, and the model answering him never sees Ann's message.
        again, _ = send(g, "bob", [*ann_next, {"role": "user", "content": "What did she say?"}])
        assert again == bob
        # Each turn records who asked for it.
        for session, name in ((ann, "ann"), (bob, "bob")):
            turns = g.api("GET", f"/sessions/{session}", as_=name)["turns"]
            assert [t.get("requested_by") for t in turns] == [{"token": name}] * 2
    to_bob = g.model_requests()[-1]
    assert user_texts(to_bob) == ["Hi", "What did she say?"], to_bob


def test_end_users_of_one_token_keep_their_own_sessions(gateway):
    steps = [text("Hello."), text("Hello."), text("Noted."), text("I cannot tell.")]
    with gateway(steps) as g:
        first, hello = send(g, None, HI, user="ann")
        second, _ = send(g, None, HI, user="bob")
        assert first != second
        after = [*HI, {"role": "assistant", "content": hello}]
        again, _ = send(g, None, [*after, {"role": "user", "content": "secret"}], user="ann")
        assert again == first
        again, _ = send(g, None, [*after, {"role": "user", "content": "and?"}], user="bob")
        assert again == second
        turns = g.api("GET", f"/sessions/{first}")["turns"]
        assert [t.get("requested_by") for t in turns] == [{"token": "default", "user": "ann"}] * 2
    assert user_texts(g.model_requests()[-1]) == ["Hi", "and?"]


def test_an_edited_earlier_message_starts_a_new_session(gateway):
    steps = [text("Hello."), text("Paris."), text("Rome.")]
    with gateway(steps, tokens=["ann"]) as g:
        session, hello = send(g, "ann", HI)
        after = [*HI, {"role": "assistant", "content": hello}]
        again, _ = send(g, "ann", [*after, {"role": "user", "content": "Capital of France?"}])
        assert again == session
        # The user edits that question: the history she sends stops before it.
        edited, _ = send(g, "ann", [*after, {"role": "user", "content": "Capital of Italy?"}])
        assert edited != session
        assert g.api("GET", f"/sessions/{session}", as_="ann")["session"]["turns"] == 2
    # The model answering the edit never saw the question she took back.
    assert user_texts(g.model_requests()[-1]) == ["Hi", "Capital of Italy?"]


def test_the_session_header_works_only_for_the_token_that_started_it(gateway):
    with gateway([text("One."), text("Two.")], tokens=["ann", "bob"]) as g:
        ann, _ = send(g, "ann", [{"role": "user", "content": "a"}])
        with pytest.raises(openai.NotFoundError) as refused:
            g.client("bob").chat.completions.create(
                model="gpt-cordon",
                messages=[{"role": "user", "content": "b"}],
                extra_headers={"X-Cordon-Session": ann},
            )
        assert "no session" in str(refused.value)
        # Ann's own header still works, and Bob's refused request left her session alone.
        again, _ = send(
            g, "ann", [{"role": "user", "content": "b"}], extra_headers={"X-Cordon-Session": ann}
        )
        assert again == ann
        assert g.api("GET", f"/sessions/{ann}", as_="ann")["session"]["turns"] == 2


def answer_next_question(g, answer, seen):
    """Answers the next approval question through the API as the default token."""
    for _ in range(300):
        for p in g.api("GET", "/approvals")["pending"]:
            key = (p["session"], p["call_id"])
            if key not in seen:
                seen.add(key)
                g.api("POST", f"/approvals/{p['session']}/{p['call_id']}", json={"answer": answer})
                return
        time.sleep(0.05)
    raise AssertionError("no question came")


def ask_while_answering(g, as_, messages, answer, seen):
    thread = threading.Thread(target=answer_next_question, args=(g, answer, seen))
    thread.start()
    try:
        return send(g, as_, messages)
    finally:
        thread.join(30)


def test_an_always_stays_with_the_session_and_requester_it_was_given_for(gateway):
    schema = calls(("sql_schema", {"database": "/db/shop.db"}))
    steps = [schema, text("orders"), schema, text("orders"), schema, text("orders again")]
    with gateway(steps, tokens=["ann", "bob"]) as g:
        seen = set()
        before = {(r["session"], r["call_id"]) for r in audit(g, "sql_schema")}
        # `sql.sql_schema` is `ask` in cordon.toml: Ann's call is asked about; `always`.
        ann, answer = ask_while_answering(g, "ann", HI, "always", seen)
        # Bob sends exactly Ann's next history: he gets a session of his own, and his call is
        # asked about again (`no`), not run on Ann's `always`.
        after = [*HI, {"role": "assistant", "content": answer}]
        bob, _ = ask_while_answering(
            g, "bob", [*after, {"role": "user", "content": "Again?"}], "no", seen
        )
        assert bob != ann
        # Ann's own next turn runs the tool on her answer, and the record says which answer.
        again, _ = send(g, "ann", [*after, {"role": "user", "content": "Again?"}])
        assert again == ann
        records = [r for r in audit(g, "sql_schema") if (r["session"], r["call_id"]) not in before]
    by_session = {}
    for r in sorted(records, key=lambda r: r["at_ms"]):
        by_session.setdefault(r["session"], []).append(r)
    (bobs,) = by_session[bob]
    assert bobs["decision"] == "no", bobs
    assert bobs["requested_by"] == {"token": "bob"}
    first, second = by_session[ann]
    assert first["decision"] == "always" and first["requested_by"] == {"token": "ann"}
    assert first["decided_by"] == "API token `default`"
    assert second["decision"] == "auto", second
    assert second["requested_by"] == {"token": "ann"}
    why = second["decided_by"]
    assert why.startswith("policy: API token `default` answered `always` for this tool at "), why
    assert f"(call {first['call_id']}, turn 1)" in why, why
