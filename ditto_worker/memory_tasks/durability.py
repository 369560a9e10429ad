"""Is a sentence a durable preference? Rules for English, Chinese, German, French, Spanish.

"The model proposes, code decides" (memory-capabilities seed; issue 25): the offline model
marked a one-off request as a durable preference every time, and a public report had an
assistant persist a hypothetical discussion as a fact (anthropics/claude-code#69847). The
rules here judge the *whole sentence* a quote comes from (a quote cut out of "If I were
you I'd reply in German" must not pass because its fragment looks durable):

* :func:`durability_reasons` — ``not_durable_one_off`` (scoped to this message, this time,
  today …), ``not_durable_hypothetical`` (if, what if, would you, suppose …) and
  ``not_durable_question`` (``?``, ``？``, ``吗``, a leading interrogative). A durable marker
  ("from now on", "ab heute", "从今天开始", "always") is removed first, so "starting today"
  is not a one-off. ``not_durable_tentative`` (maybe, I wonder, vielleicht, 也许 …) is
  :mod:`.hedges`.
* :func:`has_preference_cue` — the sentence asks something of the assistant's
  communication (reply, write, answer, language, tone, format, prefer …); a sentence that
  only mentions German beer has none (``no_preference``).
* :func:`is_negated` — a negation in the same clause before the value's word ("not in
  German", "keine Stichpunkte", "不要用英文"): the user rejects that value.

The lists are deliberately conservative: a rule that rejects a real preference costs a
true admission; one that admits a one-off stores something the user never asked for.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from ditto_worker.memory_tasks.hedges import is_tentative
from ditto_worker.memory_tasks.phrases import phrase_pattern

__all__ = [
    "NEGATION_WINDOW",
    "durability_reasons",
    "has_preference_cue",
    "is_negated",
    "negated",
]

# fmt: off
_DURABLE = phrase_pattern(
    [
        # English
        "from now on", "from here on", "going forward", "starting today", "starting now",
        "from today on", "from today onwards", "as of today", "always", "every time", "in future",
        "in the future", "whenever",
        # German
        "ab jetzt", "ab sofort", "ab heute", "von nun an", "von jetzt an", "immer", "in Zukunft",
        "künftig", "zukünftig", "jedes Mal", "immer wenn", "wann immer",
        # Chinese
        "从现在开始", "从现在起", "从今天开始", "从今天起", "从今以后", "以后", "今后", "总是",
        "一直", "每次", "始终",
        # French, Spanish
        "à partir de maintenant", "à partir d'aujourd'hui", "désormais", "dorénavant", "toujours",
        "a partir de ahora", "a partir de hoy", "de ahora en adelante", "siempre",
        # Japanese
        "今後", "これから", "いつも", "常に", "毎回",
    ]
)

_ONE_OFF = phrase_pattern(
    [
        # English
        "this time", "just this once", "this once", "just for this", "only for this",
        "for this one", "for this email", "for this message", "for this reply", "for this answer",
        "for this draft", "for this task", "for this report", "for this summary",
        "for the next reply", "for the next message", "for now", "right now", "today", "tonight",
        "for today", "this morning", "this afternoon", "for the moment", "temporarily", "one-off",
        "one off", "this email", "this message", "this reply", "this draft", "this document",
        "the next email", "the next message",
        # German
        "heute", "diesmal", "dieses Mal", "nur für diese", "nur für dieses", "nur für den",
        "nur für die", "für diese E-Mail", "für diese Mail", "für diese Nachricht",
        "diese E-Mail", "diese Mail", "diese Nachricht", "diesen Bericht", "dieses Dokument",
        "ausnahmsweise", "vorerst", "vorläufig", "im Moment", "momentan", "einmalig", "gerade",
        # Chinese
        "这次", "这一次", "这份", "这回", "本次", "今天", "今晚", "这封", "这条", "这篇", "暂时",
        "临时", "仅此一次", "就这一次", "目前先", "先用",
        # French, Spanish
        "cette fois", "aujourd'hui", "pour ce message", "ce message", "cet e-mail", "ce mail",
        "este mensaje", "este correo", "pour cet e-mail", "pour ce mail", "juste pour",
        "pour l'instant", "pour le moment", "esta vez", "hoy", "solo para este", "solo para esta",
        "para este correo", "por ahora", "de momento",
        # Japanese
        "今回", "今日", "今だけ", "とりあえず", "このメール",
    ]
)

_HYPOTHETICAL = phrase_pattern(
    [
        # English
        "if", "what if", "would you", "would it", "what would", "suppose", "supposing", "imagine",
        "hypothetically", "hypothetical", "let's say", "say you", "in theory", "assuming",
        "assume", "were I", "had I", "unless", "when I", "when I'm", "while I'm", "as long as",
        "in case",
        # German
        "wenn", "falls", "angenommen", "stell dir vor", "stellen Sie sich vor", "was wäre",
        "würdest du", "würden Sie", "was würde", "hypothetisch", "nehmen wir an", "theoretisch",
        "sofern", "es sei denn", "solange", "während ich", "für den Fall",
        # Chinese
        "如果", "假如", "假设", "要是", "万一", "想象", "假使", "倘若", "设想", "的话", "除非",
        "当我", "只要",
        # French, Spanish
        "si", "et si", "imaginons", "supposons", "imagine que", "hypothétiquement", "sauf si",
        "à moins que", "supongamos", "a menos que", "en caso de", "imagina que",
        "hipotéticamente", "qué pasaría",
        # Japanese
        "もし", "仮に", "たとえば",
    ]
)

_QUESTION_END = re.compile(r"[?？¿]|[吗呢][\s。.!！]*$")
_QUESTION_START = phrase_pattern(
    [
        "what", "why", "how", "which", "who", "do you", "does", "did you", "is it", "are you",
        "can you", "could you", "should I", "should we", "shall I", "shall we", "will you",
        "may I", "was", "warum", "wieso", "weshalb", "welche", "welcher", "welches", "wie",
        "kannst du", "könntest du", "können Sie", "soll ich", "sollen wir", "darf ich", "为什么",
        "什么", "怎么", "怎样", "是否", "能不能", "可不可以", "要不要", "哪", "pourquoi",
        "comment", "quel", "quelle", "est-ce que", "qué", "por qué", "cómo", "cuál",
    ]
)
_QUESTION_INSIDE = re.compile(r"是不是|能不能|可不可以|要不要|有没有|ですか|ますか")
_WHAT_IF = re.compile(r"\W*(?:what if|et si|y si)\b", re.IGNORECASE)

_CUES = phrase_pattern(
    [
        # English
        "repl*", "respon*", "answer*", "writ*", "wrote", "messag*", "talk*", "speak*",
        "communicat*", "languag*", "tone", "style", "format*", "summar*", "update*", "report*",
        "explain*", "email*", "e-mail*", "chat*", "prefer*", "I'd like", "I would like", "I want",
        "use", "keep it", "keep your", "be more", "be less", "address me", "give me",
        # German
        "antwort*", "schreib*", "sprich", "sprech*", "rede", "red mit", "Nachricht*", "Sprache",
        "Ton", "Stil", "Format", "Zusammenfass*", "Bericht*", "formulier*", "bevorzug*",
        "ich möchte", "hätte gern*", "kommunizier*", "erklär*", "verwende*", "benutze*", "nutze*",
        "halte dich",
        # Chinese
        "回复", "回答", "答复", "写", "说", "讲", "交流", "沟通", "用", "语言", "语气", "格式",
        "风格", "总结", "汇报", "消息", "报告", "喜欢", "希望", "偏好", "采用", "使用",
        # French
        "répond*", "répons*", "écri*", "parl*", "langue", "ton", "format", "résum*", "préfèr*",
        "je voudrais", "utilis*",
        # Spanish
        "respond*", "respuesta*", "escrib*", "habl*", "mensaje*", "idioma", "tono", "estilo",
        "formato", "resum*", "prefier*", "prefer*", "usa", "utiliza*", "respónd*",
        "contést*", "contesta*", "escríb*",
        # Japanese
        "返信", "返事", "回答", "書い", "書く", "話し", "使っ", "使う", "お願い", "ください",
    ]
)

_NEGATIONS = phrase_pattern(
    [
        "not", "don't", "doesn't", "didn't", "won't", "can't", "shouldn't", "never", "no", "stop",
        "without", "avoid", "no more", "nor", "instead of", "rather than", "nicht", "kein*",
        "nie", "niemals", "ohne", "keinesfalls", "pas", "jamais", "sans", "ne", "nunca", "sin",
        "ni",
    ]
)
# fmt: on
_NEGATIONS_CJK = re.compile(r"不(?![错過过仅少断同久好])|别(?![的人])|没(?!错)|勿|无需|甭|莫")
"""Chinese negations; 不错 (good), 不过 (but), 不仅 (not only), 不少 (many), 别的 (other),
没错 (right) … are not."""
_NEGATION_PATTERNS = (_NEGATIONS, _NEGATIONS_CJK)
NEGATION_WINDOW = 60
"""How far (characters) before a value's word a negation is looked for, within its clause."""
_CLAUSE_BREAK = re.compile(
    r"[,;:，、；：—–]|\s-\s|\b(?:but|aber|sondern|mais|pero)\b|不过|但是|可是|而是|但"
)


def _without_durable_markers(sentence: str) -> str:
    return _DURABLE.sub(" ", sentence)


def durability_reasons(sentence: str) -> tuple[str, ...]:
    """Reason codes that make ``sentence`` not a durable preference (empty: durable).

    Args:
        sentence: the user's whole sentence the quote comes from (a candidate text).

    Returns:
        A subset of ``("not_durable_one_off", "not_durable_hypothetical",
        "not_durable_question", "not_durable_tentative")`` in that order; tentative
        (:func:`~ditto_worker.memory_tasks.hedges.is_tentative`) only when no other
        reason applies (a subjunctive in an "if" clause is the hypothetical's).
    """
    reasons: list[str] = []
    if _ONE_OFF.search(_without_durable_markers(sentence)):
        reasons.append("not_durable_one_off")
    if _HYPOTHETICAL.search(_without_durable_markers(sentence)):
        reasons.append("not_durable_hypothetical")
    if _is_question(sentence):
        reasons.append("not_durable_question")
    if not reasons and is_tentative(sentence):  # "wäre", "would be" in an "if" clause
        reasons.append("not_durable_tentative")
    return tuple(reasons)


def _is_question(sentence: str) -> bool:
    text = sentence.strip()
    if _QUESTION_END.search(text) or _QUESTION_INSIDE.search(text):
        return True
    if _WHAT_IF.match(text):
        return False  # "What if you wrote in French." is hypothetical, not a question
    start = _QUESTION_START.match(text.lstrip("\"'“„«(¡"))
    return start is not None


def has_preference_cue(sentence: str) -> bool:
    """True when ``sentence`` asks something of the assistant's communication.

    A word about replying, writing, language, tone, format … or a preference verb
    ("prefer", "ich möchte", "希望") in English, German, Chinese, French or Spanish.
    """
    return _CUES.search(sentence) is not None


def is_negated(sentence: str, start: int) -> bool:
    """True when a negation precedes offset ``start`` in the same clause of ``sentence``.

    Clauses end at ``, ; : — ，、；：``, at "but"/"aber"/"mais"/"pero" and at 不过/但是/而是,
    so in "Don't use formal language, keep it casual" only "formal" is negated; the search
    reaches back at most :data:`NEGATION_WINDOW` characters.
    """
    return negated(sentence, [start])[0]


def negated(sentence: str, starts: Sequence[int]) -> list[bool]:
    """:func:`is_negated` for each offset in ``starts`` (clause breaks found once)."""
    breaks = [m.end() for m in _CLAUSE_BREAK.finditer(sentence)]
    out: list[bool] = []
    for start in starts:
        i = bisect.bisect_right(breaks, start) - 1
        clause_start = max(breaks[i] if i >= 0 else 0, start - NEGATION_WINDOW)
        out.append(
            any(p.search(sentence, clause_start, start) is not None for p in _NEGATION_PATTERNS)
        )
    return out
