"""Properties of the admission policy over generated input (hypothesis; issue 25 item 3).

Whatever the text: candidates are verbatim, nothing outside a user turn is ever admitted,
a quote that only a system/assistant/tool turn holds is `quote_not_from_user`, a secret
added to an admitted preference sentence turns it into `secret`, and `find_secrets`
reports kinds, never text.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from ditto_worker.memory_tasks.policy import (
    SECRET_KINDS,
    Proposal,
    Turn,
    admit,
    candidate_sentences,
    find_secrets,
)
from ditto_worker.memory_tasks.secret_shapes import luhn_valid

ALPHABET = st.sampled_from(
    list("abcXYZ  .,!?;:'\"\n0123456789-@/")
    + list("。！？，的我用中文德语日本語")
    + ["e.g.", "z.B."]
)
TEXT = st.lists(ALPHABET, max_size=80).map("".join)
ROLE = st.sampled_from(["user", "assistant", "system", "tool"])
TURNS = st.lists(st.builds(Turn, ROLE, TEXT), max_size=5)
PREFERENCES = [
    ("language", "de", "Please always reply in German."),
    ("language", "zh", "以后请用中文回复。"),
    ("format", "bullets", "Schreib Berichte ab jetzt in Stichpunkten."),
    ("length", "short", "Keep your answers short."),
]


@settings(max_examples=200, deadline=None)
@given(TURNS)
def test_candidates_are_verbatim_user_text(turns: list[Turn]) -> None:
    for i, candidate in enumerate(candidate_sentences(turns)):
        assert candidate.index == i
        turn = turns[candidate.turn_index]
        assert turn.role == "user"
        assert turn.content[candidate.start : candidate.end] == candidate.text
        assert candidate.text == candidate.text.strip() and candidate.text


@settings(max_examples=200, deadline=None)
@given(TURNS, TEXT, st.sampled_from(PREFERENCES))
def test_nothing_outside_user_turns_is_admitted(
    turns: list[Turn], quote: str, preference: tuple[str, str, str]
) -> None:
    field, value, _ = preference
    decision = admit(Proposal(field, value, quote), turns)
    if decision.admitted:
        assert any(t.role == "user" and quote in t.content for t in turns)
        assert quote.strip()


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(PREFERENCES), st.sampled_from(["assistant", "system", "tool"]), TEXT)
def test_a_preference_only_another_role_states_is_not_from_user(
    preference: tuple[str, str, str], role: str, user_text: str
) -> None:
    field, value, quote = preference
    turns = [Turn(role, quote), Turn("user", user_text)]
    decision = admit(Proposal(field, value, quote), turns)
    if quote not in user_text:
        assert decision.reasons == ("quote_not_from_user",)


def _card(rng: random.Random) -> str:
    while True:
        digits = "4" + "".join(str(rng.randrange(10)) for _ in range(15))
        if luhn_valid(digits):
            return " ".join(digits[i : i + 4] for i in range(0, 16, 4))


def _key(rng: random.Random) -> str:
    chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return "sk-" + "".join(rng.choice(chars) for _ in range(rng.randrange(20, 48)))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(PREFERENCES), st.integers(0, 2**32), st.sampled_from([_card, _key]))
def test_a_secret_in_an_admitted_sentence_is_rejected(
    preference: tuple[str, str, str], seed: int, make: object
) -> None:
    field, value, sentence = preference
    assert admit(Proposal(field, value, sentence), [Turn("user", sentence)]).admitted
    secret = make(random.Random(seed))  # type: ignore[operator]
    quote = f"{sentence} {secret}"
    decision = admit(Proposal(field, value, quote), [Turn("user", quote)])
    assert "secret" in decision.reasons
    assert not decision.admitted
    kinds = find_secrets(quote)
    assert kinds and set(kinds) <= set(SECRET_KINDS)
    assert not any(secret in k for k in kinds)  # kinds, never the text


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_find_secrets_returns_known_kinds_only(text: str) -> None:
    kinds = find_secrets(text)
    assert kinds == [k for k in SECRET_KINDS if k in kinds]  # ordered, distinct
