"""The default allow-list: communication-preference fields, values and grounding words.

The memory-capabilities seed: "The write example admits only explicitly approved durable
communication preferences … Expand the application policy deliberately for other
domains." This table is that approval. Each value lists the words that *ground* it in a
quote, in English, German, Chinese, French, Spanish and Japanese (and the language's own
name for itself): a quote proposing ``language=de`` must name German ("German",
"Deutsch", "德语", "allemand", "alemán", "ドイツ語" …).

Words are phrases for :func:`ditto_worker.memory_tasks.phrases.phrase_pattern` (word
boundaries in spaced scripts, substrings in CJK, ``*`` for any ending). Language values
are BCP-47 primary language subtags (RFC 5646), the codes
:func:`ditto_worker.memory_tasks.language.detect_language` returns.
"""

from __future__ import annotations

__all__ = ["DEFAULT_VOCABULARY"]

# fmt: off
_LANGUAGE: dict[str, tuple[str, ...]] = {
    "en": ("English", "Englisch", "英语", "英文", "anglais", "inglés", "ingles", "英語"),
    "zh": (
        "Chinese", "Mandarin", "Chinesisch", "中文", "汉语", "漢語", "普通话", "华语", "chinois",
        "chino", "中国語",
    ),
    "de": ("German", "Deutsch", "德语", "德文", "allemand", "alemán", "aleman", "ドイツ語"),
    "fr": (
        "French", "Französisch", "法语", "法文", "français", "francais", "francés", "frances",
        "フランス語",
    ),
    "es": (
        "Spanish", "Spanisch", "西班牙语", "西班牙文", "espagnol", "español", "espanol",
        "castellano", "スペイン語",
    ),
    "ja": ("Japanese", "Japanisch", "日语", "日文", "japonais", "japonés", "japones", "日本語"),
    "it": ("Italian", "Italienisch", "意大利语", "italien", "italiano", "イタリア語"),
    "pt": ("Portuguese", "Portugiesisch", "葡萄牙语", "portugais", "portugués", "português"),
    "ko": ("Korean", "Koreanisch", "韩语", "韩文", "coréen", "coreano", "한국어", "韓国語"),
    "ru": ("Russian", "Russisch", "俄语", "russe", "ruso", "русский", "ロシア語"),
}

_TONE: dict[str, tuple[str, ...]] = {
    "formal": (
        "formal", "formally", "formell", "formellen", "förmlich", "förmlichen", "förmliche",
        "siezen", "正式", "正规", "formel", "formelle", "formalmente", "フォーマル",
    ),
    "casual": (
        "casual", "casually", "informal", "informally", "relaxed", "locker", "lockeren",
        "lockerer", "lässig", "salopp", "duzen", "随意", "轻松", "口语化", "décontracté",
        "décontractée", "informel", "informelle", "desenfadado", "カジュアル",
    ),
    "friendly": (
        "friendly", "warm", "warmly", "freundlich", "freundlichen", "freundliche", "freundlichem",
        "herzlich", "友好", "亲切", "友善", "amical", "amicale", "chaleureux", "amigable",
        "cordial", "フレンドリー",
    ),
    "neutral": (
        "neutral", "neutrally", "objective", "matter-of-fact", "sachlich", "sachlichen",
        "neutral", "中立", "中性", "客观", "neutre", "objectif", "neutro", "objetivo",
    ),
}

_FORMAT: dict[str, tuple[str, ...]] = {
    "bullets": (
        "bullet*", "list", "lists", "Stichpunkt*", "Aufzählung*", "Liste", "Listen", "要点",
        "列表", "分点", "条目", "puces", "liste", "viñetas", "lista", "箇条書き",
    ),
    "prose": (
        "prose", "paragraph", "paragraphs", "full sentences", "Fließtext", "Absätze",
        "ganze Sätze", "ganzen Sätzen", "段落", "成段", "paragraphes", "prosa", "párrafos",
        "文章で",
    ),
    "table": ("table", "tables", "tabular", "Tabelle*", "表格", "tableau*", "tabla*", "表で"),
}

_LENGTH: dict[str, tuple[str, ...]] = {
    "short": (
        "short", "shorter", "brief", "briefly", "concise", "concisely", "succinct", "terse",
        "kurz", "kurze", "kurzen", "kürzer", "knapp", "kurzgefasst", "简短", "简洁", "简明",
        "精简", "court", "courts", "courte", "bref", "brève", "breve", "breves", "corto", "corta",
        "conciso", "concisa", "簡潔",
    ),
    "medium": (
        "medium length", "medium-length", "moderate length", "mittellang", "mittlerer Länge",
        "适中", "中等长度", "longueur moyenne", "longitud media",
    ),
    "long": (
        "long", "longer", "detailed", "in detail", "thorough", "thoroughly", "in depth",
        "ausführlich", "ausführliche", "ausführlichen", "detailliert", "detaillierte", "lang",
        "länger", "详细", "详尽", "长一点", "détaillé", "détaillée", "détaillés", "détaillées",
        "en détail",
        "detallado", "detallada", "largo", "larga", "詳しく", "詳細",
    ),
}

# fmt: on
DEFAULT_VOCABULARY: dict[str, dict[str, tuple[str, ...]]] = {
    "language": _LANGUAGE,
    "tone": _TONE,
    "format": _FORMAT,
    "length": _LENGTH,
}
"""``{field: {value: grounding phrases}}``: the default :class:`PreferencePolicy` table."""
