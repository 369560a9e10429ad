"""Admission policy of the worked memory tasks: the model proposes, code decides.

Issue 25 item 3 (`write`: quotes verbatim from the user's own turns, values grounded and
in the allow-list, durable statements only, nothing secret-shaped; rules for English,
Chinese and German at least) and SPEC.md MEM-TASK-3. Every rejection asserts the exact
reason codes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from ditto_worker.memory_tasks import policy as policy_module
from ditto_worker.memory_tasks.policy import (
    DEFAULT_POLICY,
    REASONS,
    SECRET_KINDS,
    Candidate,
    InvalidTurnError,
    PolicyError,
    PreferencePolicy,
    Proposal,
    Turn,
    admit,
    candidate_sentences,
    find_secrets,
    proposal_schema,
    proposals_from_json,
    turns_from_messages,
)


def _user(*contents: str) -> list[Turn]:
    return [Turn("user", c) for c in contents]


def _decide(field: str, value: str, quote: str, *turns: Turn) -> tuple[str, ...]:
    conversation = list(turns) or _user(quote)
    return admit(Proposal(field, value, quote), conversation).reasons


# --- candidate sentences (user turns only; splitting per script) --------------------------


def test_candidates_come_from_user_turns_only() -> None:
    turns = [
        Turn("system", "Always answer in German. Be formal."),
        Turn("user", "Hi. Please reply in English from now on."),
        Turn("assistant", "Sure! I will answer in French."),
        Turn("tool", "result: reply in Spanish."),
        Turn("user", "Thanks!"),
    ]
    got = candidate_sentences(turns)
    assert got == [
        Candidate(0, 1, "Hi.", 0),
        Candidate(1, 1, "Please reply in English from now on.", 4),
        Candidate(2, 4, "Thanks!", 0),
    ]
    for c in got:
        assert turns[c.turn_index].content[c.start : c.end] == c.text


@pytest.mark.parametrize(
    ("content", "sentences"),
    [
        ("以后请用中文回复。谢谢！你好吗？", ["以后请用中文回复。", "谢谢！", "你好吗？"]),
        ("好的!以后用中文", ["好的!", "以后用中文"]),
        ("「请用中文。」然后呢", ["「请用中文。」", "然后呢"]),
        (
            "今後は日本語で返信してください。よろしく。",
            ["今後は日本語で返信してください。", "よろしく。"],
        ),
        ("Bitte antworte z.B. auf Deutsch. Danke.", ["Bitte antworte z.B. auf Deutsch.", "Danke."]),
        (
            "Wir treffen uns am 3. Mai. Antworte knapp.",
            ["Wir treffen uns am 3. Mai.", "Antworte knapp."],
        ),
        ("Use bullets, e.g. for updates. Thanks!", ["Use bullets, e.g. for updates.", "Thanks!"]),
        ("Mr. Smith wrote. Reply briefly.", ["Mr. Smith wrote.", "Reply briefly."]),
        ("Version 2.5 shipped. Good.", ["Version 2.5 shipped.", "Good."]),
        ("Réponds en français. Merci !", ["Réponds en français.", "Merci !"]),
        ("¿Puedes? Responde en español.", ["¿Puedes?", "Responde en español."]),
        ("one\ntwo\n\n- three", ["one", "two", "- three"]),
        ("Wait... what? OK.", ["Wait...", "what?", "OK."]),
        ("apples, pears etc. and more. Done.", ["apples, pears etc. and more.", "Done."]),
        ("...   \n  ", []),
    ],
)
def test_sentence_splitting_per_script(content: str, sentences: list[str]) -> None:
    assert [c.text for c in candidate_sentences(_user(content))] == sentences


def test_turns_from_messages_validates_each_message() -> None:
    assert turns_from_messages([{"role": "user", "content": "hi"}]) == [Turn("user", "hi")]
    with pytest.raises(InvalidTurnError) as bad_role:
        turns_from_messages([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])
    assert bad_role.value.field == "messages[1].role"
    with pytest.raises(InvalidTurnError) as bad_content:
        turns_from_messages([{"role": "user", "content": 3}])
    assert bad_content.value.field == "messages[0].content"
    with pytest.raises(InvalidTurnError) as not_object:
        turns_from_messages(["hello"])  # type: ignore[list-item]
    assert not_object.value.field == "messages[0]"
    with pytest.raises(InvalidTurnError):
        Turn("developer", "x")


# --- durable preferences that are admitted -------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "quote"),
    [
        ("language", "de", "Please always reply in German."),
        ("language", "en", "From now on, write your updates in English."),
        ("language", "fr", "I prefer my progress reports in French."),
        ("tone", "formal", "Keep the tone formal in your messages to me."),
        ("format", "bullets", "Use bullet points for status updates."),
        ("length", "short", "Keep your answers short."),
        ("language", "de", "Bitte antworte mir immer auf Deutsch."),
        ("language", "de", "Ab jetzt bitte alle Nachrichten auf Deutsch."),
        ("format", "bullets", "Schreib Zusammenfassungen bitte in Stichpunkten."),
        ("length", "short", "Halte deine Antworten kurz und knapp."),
        ("language", "zh", "以后请用中文回复我。"),
        ("language", "zh", "请一直用中文和我交流"),
        ("format", "table", "汇报进度时请用表格。"),
        ("tone", "casual", "以后回复语气轻松一点。"),
        ("length", "long", "总结写详细一点。"),
        ("language", "fr", "Réponds-moi toujours en français."),
        ("language", "es", "Responde siempre en español, por favor."),
        ("language", "ja", "今後は日本語で返信してください。"),
        ("language", "de", "Starting today, reply in German."),
        ("language", "de", "Ab heute antworte bitte auf Deutsch."),
        ("language", "zh", "从今天开始用中文回复。"),
        ("tone", "casual", "Don't use formal language, keep it casual."),
        ("language", "de", "Reply in German, not in English."),
        ("language", "zh", "不过以后请用中文回复。"),  # 不过 (but) is no negation
        ("language", "zh", "不要用英文，而是用中文回复。"),
        ("format", "table", "不错，以后汇报都用表格。"),  # 不错 (good) is no negation
        ("language", "de", "Whenever you write to me, use German."),
        ("language", "de", "Bitte antworte mir immer wenn möglich auf Deutsch."),
        ("language", "es", "A partir de hoy, respóndeme en español."),
        ("length", "short", "Ich möchte ab sofort kurze Antworten."),
    ],
)
def test_durable_preferences_are_admitted(field: str, value: str, quote: str) -> None:
    decision = admit(Proposal(field, value, quote), _user(quote))
    assert (decision.admitted, decision.reasons) == (True, ())
    assert decision.message.startswith("admitted")


def test_a_quote_may_be_part_of_a_user_sentence() -> None:
    turns = _user("Hello there. Please always reply in German, thanks.")
    assert _decide("language", "de", "reply in German", *turns) == ()


# --- where the quote comes from -------------------------------------------------------------


def test_quote_from_system_assistant_or_tool_is_rejected_even_if_user_said_similar() -> None:
    turns = [
        Turn("system", "Always reply in German."),
        Turn("user", "please always reply in German"),  # lower case: not the same text
        Turn("assistant", "From now on I will write in French."),
        Turn("tool", "Use bullet points for updates."),
    ]
    assert _decide("language", "de", "Always reply in German.", *turns) == ("quote_not_from_user",)
    assert _decide("language", "fr", "From now on I will write in French.", *turns) == (
        "quote_not_from_user",
    )
    assert _decide("format", "bullets", "Use bullet points for updates.", *turns) == (
        "quote_not_from_user",
    )
    assert _decide("language", "de", "please always reply in German", *turns) == ()


@pytest.mark.parametrize(
    ("quote", "reasons"),
    [
        ("Please always reply in german.", ("quote_not_verbatim",)),  # case differs
        ("Please  always reply in German.", ("quote_not_verbatim",)),  # spacing differs
        ("Always reply in German please", ("quote_not_verbatim",)),  # invented
        ("", ("quote_empty", "value_not_grounded")),
        ("   ", ("quote_empty", "value_not_grounded")),
    ],
)
def test_quote_must_be_verbatim(quote: str, reasons: tuple[str, ...]) -> None:
    turns = _user("Please always reply in German.")
    assert _decide("language", "de", quote, *turns) == reasons


def test_candidate_index_must_hold_the_quote() -> None:
    turns = _user("Hi.", "Please always reply in German.")
    good = Proposal("language", "de", "Please always reply in German.", 1)
    assert admit(good, turns).admitted
    wrong = Proposal("language", "de", "Please always reply in German.", 0)
    assert admit(wrong, turns).reasons == ("quote_not_in_candidate",)
    missing = Proposal("language", "de", "Please always reply in German.", 7)
    assert admit(missing, turns).reasons == ("quote_not_in_candidate",)


def test_durability_is_judged_on_the_whole_sentence_not_the_fragment() -> None:
    turns = _user("If I were you, I'd reply in German.", "Just for this email, reply in French.")
    assert _decide("language", "de", "reply in German", *turns) == ("not_durable_hypothetical",)
    assert _decide("language", "fr", "reply in French", *turns) == ("not_durable_one_off",)


@pytest.mark.parametrize(
    ("field", "value", "sentence", "fragment"),
    [
        ("language", "de", "Please don't reply in German.", "reply in German"),
        ("language", "en", "以后不要用英文回复。", "用英文回复"),
        ("format", "bullets", "Bitte schreib keine Stichpunkte mehr.", "Stichpunkte mehr."),
        ("tone", "formal", "Never write formally to me.", "write formally to me."),
    ],
)
def test_a_fragment_keeps_the_negation_of_its_sentence(
    field: str, value: str, sentence: str, fragment: str
) -> None:
    assert _decide(field, value, fragment, *_user(sentence)) == ("value_negated",)


def test_every_occurrence_of_a_quote_must_be_durable() -> None:
    turns = _user("Reply in German.", "Just this once: Reply in German.")
    assert _decide("language", "de", "Reply in German.", *turns) == ("not_durable_one_off",)


# --- field and value ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "quote", "reasons"),
    [
        ("language", "klingon", "Please always reply in German.", ("value_not_in_policy",)),
        ("language", "German", "Please always reply in German.", ("value_not_in_policy",)),
        ("mood", "happy", "Please always reply in German.", ("field_not_in_policy",)),
        ("language", "fr", "Please always reply in German.", ("value_not_grounded",)),
        ("tone", "formal", "Please always reply in German.", ("value_not_grounded",)),
        ("language", "de", "Please always reply in Germany style.", ("value_not_grounded",)),
        ("language", "zh", "以后请用英文回复。", ("value_not_grounded",)),
        ("language", "en", "Please never reply in English.", ("value_negated",)),
        ("format", "bullets", "No more bullet points in your updates.", ("value_negated",)),
        ("format", "bullets", "Bitte keine Stichpunkte in Antworten.", ("value_negated",)),
        ("language", "en", "以后不要用英文回复。", ("value_negated",)),
        ("tone", "formal", "Don't use formal language, keep it casual.", ("value_negated",)),
        ("language", "de", "Write in English instead of German.", ("value_negated",)),
    ],
)
def test_value_must_be_allowed_grounded_and_not_negated(
    field: str, value: str, quote: str, reasons: tuple[str, ...]
) -> None:
    assert _decide(field, value, quote) == reasons


# --- durability: one-off, hypothetical, question (EN, ZH, DE, FR, ES) ------------------------


@pytest.mark.parametrize(
    ("field", "value", "quote"),
    [
        ("language", "de", "Just for this email, write in German."),
        ("language", "de", "Reply in German this time."),
        ("format", "table", "For now, use a table for the report."),
        ("length", "short", "Keep it short today, I'm busy."),
        ("tone", "formal", "Only for this message, use a formal tone."),
        ("language", "de", "Antworte heute auf Deutsch."),
        ("language", "de", "Schreib diesmal auf Deutsch."),
        ("length", "short", "Nur für diese E-Mail bitte kurz antworten."),
        ("language", "en", "Ausnahmsweise auf Englisch antworten."),
        ("language", "en", "这次用英文回复。"),
        ("language", "en", "今天用英文写总结。"),
        ("format", "table", "这封邮件用表格写。"),
        ("language", "fr", "Réponds en français cette fois."),
        ("language", "es", "Responde en español esta vez."),
        ("language", "en", "Just this once, answer in English."),
        ("language", "de", "Write this email in German."),
        ("language", "de", "Schreib diese E-Mail auf Deutsch."),
        ("format", "table", "这份报告用表格写。"),
        ("language", "fr", "Écris ce message en français."),
        ("language", "ja", "今回は日本語で返信してください。"),
    ],
)
def test_one_off_requests_are_not_durable(field: str, value: str, quote: str) -> None:
    assert _decide(field, value, quote) == ("not_durable_one_off",)


@pytest.mark.parametrize(
    ("field", "value", "quote"),
    [
        ("language", "de", "If I were in Berlin, I'd want replies in German."),
        ("language", "fr", "What if you wrote your updates in French."),
        ("language", "de", "Would you reply in German from now on."),
        ("tone", "formal", "Suppose my boss reads it: then a formal tone is better."),
        ("language", "en", "Imagine you had to answer in English."),
        ("language", "de", "Wenn ich in Berlin wäre, würde ich Antworten auf Deutsch wollen."),
        ("language", "en", "Falls du Zeit hast, antworte auf Englisch."),
        ("language", "en", "Angenommen, du schreibst auf Englisch."),
        ("language", "en", "如果我是经理，我会要求用英文写报告。"),
        ("language", "de", "假如要用德语回复呢，会怎样"),
        ("language", "de", "要是客户在德国的话，用德语回复。"),
        ("language", "fr", "Si j'étais à Paris, je voudrais des réponses en français."),
        ("language", "es", "Supongamos que respondes en español."),
        ("language", "en", "Unless the client is German, reply in English."),
        ("language", "en", "When I'm travelling, reply in English."),
        ("language", "en", "Es sei denn, der Kunde ist Deutscher: antworte auf Englisch."),
        ("language", "en", "除非客户是中国人，用英文回复。"),
        ("language", "en", "もし可能なら英語で返信してください。"),
    ],
)
def test_hypotheticals_are_not_durable(field: str, value: str, quote: str) -> None:
    assert _decide(field, value, quote) == ("not_durable_hypothetical",)


@pytest.mark.parametrize(
    ("field", "value", "quote"),
    [
        ("language", "de", "Can you reply in German?"),
        ("language", "de", "Should I write to you in German"),
        ("format", "bullets", "Do you prefer bullet points for updates?"),
        ("language", "de", "Kannst du auf Deutsch antworten?"),
        ("language", "de", "Warum antwortest du nicht auf Deutsch"),
        ("language", "zh", "你能用中文回复吗"),
        ("language", "zh", "可以用中文回复吗？"),
        ("language", "zh", "能不能用中文写总结"),
        ("language", "fr", "Pourquoi tu ne réponds pas en français"),
        ("language", "es", "¿Puedes responder en español?"),
        ("language", "ja", "日本語で返信できますか"),
        ("language", "de", "Why don't you answer in German."),
    ],
)
def test_questions_are_not_durable(field: str, value: str, quote: str) -> None:
    reasons = _decide(field, value, quote)
    assert "not_durable_question" in reasons
    assert set(reasons) <= {"not_durable_question", "value_negated"}


def test_several_rules_report_together_in_check_order() -> None:
    quote = "If you can, just this once reply in German?"
    assert _decide("language", "de", quote) == (
        "not_durable_one_off",
        "not_durable_hypothetical",
        "not_durable_question",
    )


@pytest.mark.parametrize(
    ("field", "value", "quote"),
    [
        ("language", "de", "My colleague is German."),
        ("language", "de", "I like German beer."),
        ("language", "zh", "我在学中文。"),  # "I am learning Chinese": no ask
        ("length", "long", "The meeting was long."),
        ("language", "de", "Mein Kollege ist Deutscher und kommt aus Deutschland."),
    ],
)
def test_statements_without_an_ask_are_no_preference(field: str, value: str, quote: str) -> None:
    reasons = _decide(field, value, quote)
    assert reasons in {("no_preference",), ("value_not_grounded", "no_preference")}


# --- secrets ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("my password is hunter2", ["credential"]),
        ("The password for the server is x", ["credential"]),
        ("Mein Passwort lautet Sommer2024", ["credential"]),
        ("我的密码是abc123", ["credential"]),
        ("mot de passe : lapin", ["credential"]),
        ("PIN: 4711", ["credential"]),
        ("api_key=abc", ["credential"]),
        ("-----BEGIN RSA PRIVATE KEY-----", ["private_key"]),
        ("use sk-proj-abcdefghijklmnopqrstuv", ["api_key"]),
        ("key AKIAIOSFODNN7EXAMPLE here", ["api_key"]),
        ("github_pat_" + "Z9y8" * 10, ["api_key", "base64_run"]),
        ("glpat-abcdefghij1234567890", ["api_key"]),
        ("xoxb-1234567890-abcdef", ["api_key"]),
        (
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
            ["jwt"],
        ),
        ("hash d41d8cd98f00b204e9800998ecf8427e", ["hex_run"]),
        ("blob QWxhZGRpbjpvcGVuIHNlc2FtZTEyMzQ1Njc4OTA= ok", ["base64_run"]),
        ("token: QWxhZGRpbjpvcGVuIHNlc2FtZTEyMzQ1Njc4OTA=", ["credential", "base64_run"]),
        ("card 4111 1111 1111 1111", ["card_number"]),
        ("card 4111-1111-1111-1111", ["card_number"]),
        ("iban DE89 3704 0044 0532 0130 00", ["iban"]),
        ("GB82WEST12345698765432", ["iban"]),
        ("ssn 123-45-6789", ["national_id"]),
        ("身份证 11010519491231002X", ["national_id"]),
        ("call +49 170 1234567", ["phone_number"]),
        ("call (555) 123-4567 ext", ["phone_number"]),
        ("mail bob@example.com", ["email_address"]),
        ("Authorization: Bearer abcdef123456789xyz", ["credential"]),
        ("db postgres://admin:s3cret@db.internal:5432/app", ["credential", "email_address"]),
        ("NI number JG 10 37 50 B", ["national_id"]),
        ("手机 13812345678", ["phone_number"]),
    ],
)
def test_find_secrets_reports_kinds(text: str, kinds: list[str]) -> None:
    assert find_secrets(text) == kinds


@pytest.mark.parametrize(
    "text",
    [
        "Please always reply in German.",
        "We moved 40 tables in 3 days; version 2.5.1 shipped on 2026-12-01.",
        "card 4111 1111 1111 1112",  # Luhn fails, too long for a phone
        "iban DE00 3704 0044 0532 0130 00",  # mod-97 fails
        "The passport office is closed.",
        "bypass: the old route",
        "以后请用中文回复。",
        "Pass the salt.",
        "See https://example.com/docs/reply-format for the layout.",
        "NI prefix QQ 12 34 56 C is never issued",
        "Reply within 24 hours, in 3 bullet points.",
    ],
)
def test_find_secrets_ignores_ordinary_text(text: str) -> None:
    assert find_secrets(text) == []


def test_find_secrets_returns_kinds_never_text() -> None:
    kinds = find_secrets("password: hunter2, card 4111 1111 1111 1111")
    assert kinds == ["credential", "card_number"]
    assert set(kinds) <= set(SECRET_KINDS)
    assert not any("hunter2" in k or "4111" in k for k in kinds)


@pytest.mark.parametrize(
    "quote",
    [
        "Always reply in German, my password is hunter2.",
        "Bitte immer auf Deutsch antworten, mein Passwort ist Sommer2024.",
        "以后请用中文回复，我的密码是abc123。",
        "Always send German updates to +49 170 1234567.",
        "Reply in German, key sk-proj-abcdefghijklmnopqrstuv.",
    ],
)
def test_secret_in_the_quote_is_rejected(quote: str) -> None:
    value = "zh" if "中文" in quote else "de"
    decision = admit(Proposal("language", value, quote), _user(quote))
    assert decision.reasons == ("secret",)
    assert decision.to_json()["quote"] is None  # the artifact never carries it


def test_secret_in_the_value_is_rejected() -> None:
    policy = PreferencePolicy.from_mapping({"language": {"sk-abcdefghijklmnop1234": ["German"]}})
    quote = "Please always reply in German."
    decision = admit(Proposal("language", "sk-abcdefghijklmnop1234", quote), _user(quote), policy)
    assert decision.reasons == ("secret",)


# --- the policy object, the schema, the parser -----------------------------------------------


def test_default_policy_fields_and_grounding_words() -> None:
    assert set(DEFAULT_POLICY.fields) == {"language", "tone", "format", "length"}
    assert {"en", "zh", "de", "fr", "es", "ja"} <= set(DEFAULT_POLICY.fields["language"])
    assert {"formal", "casual", "friendly", "neutral"} <= set(DEFAULT_POLICY.fields["tone"])
    assert {"bullets", "prose", "table"} <= set(DEFAULT_POLICY.fields["format"])
    assert set(DEFAULT_POLICY.fields["length"]) == {"short", "medium", "long"}
    for word in ("German", "Deutsch", "德语", "auf Deutsch", "allemand", "ドイツ語"):
        assert DEFAULT_POLICY.grounding("language", "de", f"x {word} y"), word
    assert not DEFAULT_POLICY.grounding("language", "de", "Germany")


def test_a_configured_policy_replaces_the_default() -> None:
    narrow = PreferencePolicy.from_mapping({"language": {"de": ["German", "Deutsch"]}})
    quote = "Keep your answers short."
    assert admit(Proposal("length", "short", quote), _user(quote), narrow).reasons == (
        "field_not_in_policy",
    )
    with pytest.raises(PolicyError):
        PreferencePolicy.from_mapping({"language": {}})
    with pytest.raises(PolicyError):
        PreferencePolicy.from_mapping({"language": {"de": [" "]}})
    with pytest.raises(PolicyError):
        PreferencePolicy.from_mapping({})


def test_proposal_schema_limits_quote_field_and_value() -> None:
    turns = _user("Hi. Please always reply in German.")
    candidates = candidate_sentences(turns)
    schema = proposal_schema(candidates, DEFAULT_POLICY)
    jsonschema.Draft202012Validator.check_schema(schema)
    ok = {
        "proposals": [
            {"candidate_index": 1, "quote": candidates[1].text, "field": "language", "value": "de"}
        ]
    }
    jsonschema.validate(ok, schema)
    jsonschema.validate({"proposals": []}, schema)
    bad = [
        {
            "candidate_index": 1,
            "quote": "Always reply in German",
            "field": "language",
            "value": "de",
        },
        {
            "candidate_index": 1,
            "quote": candidates[1].text,
            "field": "language",
            "value": "klingon",
        },
        {"candidate_index": 1, "quote": candidates[1].text, "field": "tone", "value": "de"},
        {"candidate_index": 9, "quote": candidates[1].text, "field": "language", "value": "de"},
        {"candidate_index": 1, "quote": candidates[1].text, "field": "mood", "value": "de"},
    ]
    for proposal in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"proposals": [proposal]}, schema)


def test_proposal_schema_without_candidates_allows_no_proposal() -> None:
    schema = proposal_schema(candidate_sentences([Turn("system", "Reply in German.")]))
    jsonschema.validate({"proposals": []}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"proposals": [{"quote": "Reply in German."}]}, schema)


def test_proposals_from_json_keeps_well_formed_entries_only() -> None:
    data = {
        "proposals": [
            {"candidate_index": 0, "quote": "q", "field": "language", "value": "de"},
            {"candidate_index": True, "quote": "q", "field": "tone", "value": "formal"},
            {"quote": "q", "field": "format"},
            "junk",
        ]
    }
    assert proposals_from_json(data) == [
        Proposal("language", "de", "q", 0),
        Proposal("tone", "formal", "q", None),
    ]
    assert proposals_from_json(json.loads("[]")) == []
    assert proposals_from_json({"proposals": "x"}) == []


def test_every_reason_has_a_message_and_decisions_serialise() -> None:
    quote = "Just for this email, write in German."
    decision = admit(Proposal("language", "de", quote), _user(quote))
    assert decision.message == REASONS["not_durable_one_off"]
    assert decision.to_json() == {
        "admitted": False,
        "field": "language",
        "value": "de",
        "quote": quote,
        "reasons": ["not_durable_one_off"],
        "message": REASONS["not_durable_one_off"],
    }
    assert all(REASONS.values())


def test_public_names_are_exported() -> None:
    assert all(hasattr(policy_module, name) for name in policy_module.__all__)


@pytest.mark.parametrize(("name", "least"), [("admission_set", 40), ("admission_holdout", 20)])
def test_the_admission_sets_are_well_formed(name: str, least: int) -> None:
    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.json"
    cases = json.loads(path.read_text(encoding="utf-8"))
    assert len(cases) >= least
    assert len({case["id"] for case in cases}) == len(cases)
    for case in cases:
        turns_from_messages(case["messages"])
        for label in case["expected"]:
            assert DEFAULT_POLICY.allows(label["field"], label["value"]), case["id"]
    categories = {case["category"] for case in cases}
    assert {"durable", "revision", "one_off", "hypothetical", "question", "secret"} <= categories
    assert {"not_user", "none"} <= categories
    assert {"en", "zh", "de", "fr"} <= {c["language"] for c in cases if c["category"] == "durable"}


def test_bench_policy_rejects_what_the_over_eager_proposer_gets_wrong() -> None:
    """bench/admission.py on the labelled set: the naive proposer trusted stores wrong
    things; the same proposals decided by admit() store none (issue 25 item 9)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "bench" / "admission.py"
    spec = importlib.util.spec_from_file_location("bench_admission", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    cases = bench.load_cases()
    trusted, _ = bench.evaluate(cases, bench.trusting_decider())
    decided, by_category = bench.evaluate(cases, bench.naive_decider())
    assert trusted.false_admissions > 0
    assert decided.false_admissions == 0
    assert decided.true_admissions >= 0.8 * decided.expected
    assert decided.right_values == decided.true_admissions
    assert by_category["not_user"].reasons["quote_not_from_user"] > 0
