"""Scripts without spaces: ICU word-break vs grapheme-cluster bigrams (issue 13).

For Thai, Lao, Khmer and Myanmar sentences, each with query words taken from inside the
sentence (as a user would type them, sometimes two words run together), both ways are
used as the keyword index of :mod:`ditto_worker.memory.text` would use them (index
terms of the sentence; query terms OR-ed; a query finds a sentence when it shares a term
with it, ranked by shared terms):

* ``icu``: ``icu.BreakIterator.createWordInstance`` (PyICU) words, no n-grams;
* ``bigrams``: the cluster unigrams + bigrams the store indexes (queries: bigrams).

Printed: recall@1 over the queries (the sentence the query was cut from ranks first),
index terms per sentence, and index tokenize time per sentence (µs, ICU's break
iterator built once per language). PyICU is not a dependency of
ditto_worker (it builds from source against ``libicu-dev``); install a wheel build to run
this: ``pip install pyicu-wheels``.

    python bench/segmentation.py
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable

from ditto_worker.memory.text import index_terms, query_terms

SENTENCES: dict[str, list[tuple[str, list[str]]]] = {
    "th": [
        ("ฉันชอบเรียนภาษาไทยมาก", ["ภาษาไทย", "เรียน", "ชอบเรียน"]),
        ("วันนี้อากาศดีมากเราจะไปเที่ยวทะเล", ["อากาศ", "ทะเล", "ไปเที่ยว"]),
        ("รถไฟฟ้าสายสีเขียวเปิดให้บริการแล้ว", ["รถไฟฟ้า", "สีเขียว", "บริการ"]),
        ("คุณแม่ทำอาหารอร่อยทุกวันอาทิตย์", ["อาหาร", "วันอาทิตย์", "อร่อย"]),
        ("นักเรียนส่งการบ้านคณิตศาสตร์ช้า", ["การบ้าน", "คณิตศาสตร์", "นักเรียน", "คณิต"]),
        ("โรงพยาบาลอยู่ใกล้สถานีตำรวจ", ["พยาบาล", "สถานี", "ตำรวจ"]),
    ],
    "lo": [
        ("ຂ້ອຍມັກຮຽນພາສາລາວຫຼາຍ", ["ພາສາລາວ", "ຮຽນ"]),
        ("ມື້ນີ້ອາກາດດີຫຼາຍ", ["ອາກາດ", "ມື້ນີ້"]),
        ("ລາວໄປຕະຫຼາດຊື້ຜັກ", ["ຕະຫຼາດ", "ຊື້ຜັກ"]),
    ],
    "km": [
        ("ខ្ញុំចូលចិត្តរៀនភាសាខ្មែរណាស់", ["ភាសាខ្មែរ", "រៀន"]),
        ("ថ្ងៃនេះអាកាសធាតុល្អណាស់", ["អាកាសធាតុ", "ថ្ងៃនេះ"]),
        ("គាត់ទៅផ្សារទិញបន្លែ", ["ផ្សារ", "ទិញបន្លែ"]),
    ],
    "my": [
        ("ကျွန်တော်မြန်မာစာကိုလေ့လာနေတယ်", ["မြန်မာစာ", "လေ့လာ"]),
        ("ဒီနေ့ရာသီဥတုကောင်းတယ်", ["ရာသီဥတု", "ဒီနေ့"]),
        ("သူဈေးကိုသွားပြီးဟင်းသီးဟင်းရွက်ဝယ်တယ်", ["ဈေး", "ဟင်းသီးဟင်းရွက်"]),
    ],
}


def icu_words(locale: str) -> Callable[[str], list[str]]:
    """ICU dictionary word-break of ``locale``: the letter/digit words of a text."""
    import icu

    breaker = icu.BreakIterator.createWordInstance(icu.Locale(locale))

    def words(text: str) -> list[str]:
        breaker.setText(text)
        bounds = [0, *breaker]
        pieces = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
        return [p for p in pieces if any(ch.isalnum() for ch in p)]

    return words


def evaluate(
    name: str, index: Callable[[str], list[str]], query: Callable[[str], list[str]]
) -> tuple[float, float, float]:
    """(recall@1, index terms per sentence, µs per sentence) over every language."""
    hits = total = 0
    sizes: list[int] = []
    started = time.perf_counter()
    for _ in range(20):
        for items in SENTENCES.values():
            for sentence, _queries in items:
                index(sentence)
    count = 20 * sum(len(items) for items in SENTENCES.values())
    elapsed = (time.perf_counter() - started) * 1e6 / count
    for lang, items in SENTENCES.items():
        indexed = [Counter(index(sentence)) for sentence, _ in items]
        sizes += [sum(c.values()) for c in indexed]
        for number, (_, queries) in enumerate(items):
            for words in queries:
                terms = set(query(words))
                scores = [sum(1 for t in terms if t in c) for c in indexed]
                best = max(range(len(items)), key=lambda i: (scores[i], -i))
                hits += int(best == number and scores[best] > 0)
                total += 1
        del lang
    return hits / total, sum(sizes) / len(sizes), elapsed


def main() -> int:
    rows = {"bigrams (chosen)": evaluate("bigrams", index_terms, query_terms)}
    try:
        locales = {"th": icu_words("th"), "lo": icu_words("lo"), "km": icu_words("km"),
                   "my": icu_words("my")}  # fmt: skip
    except ImportError:
        print("PyICU missing (pip install pyicu-wheels): ICU row skipped", file=sys.stderr)
    else:

        def icu_any(text: str) -> list[str]:
            for lang, items in SENTENCES.items():
                if any(text in s or text in q for s, qs in items for q in qs):
                    return locales[lang](text)
            return locales["th"](text)

        rows["icu word-break"] = evaluate("icu", icu_any, icu_any)
    print(f"{'':<18}{'recall@1':>10}{'terms/sentence':>16}{'us/sentence':>13}")
    for name, (recall, size, micros) in rows.items():
        print(f"{name:<18}{recall:>10.2f}{size:>16.1f}{micros:>13.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
