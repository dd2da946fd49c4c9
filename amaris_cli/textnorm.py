"""Unicode normalization of text that becomes instructions: what is stored, and what the checks read.

A text that a judge reads among its instructions must be checked as the judge reads it, not as its
bytes spell it. Three things separate the two:

  - invisible characters (zero-width spaces and joiners, bidi controls, soft hyphens, tag characters,
    variation selectors, fillers) split a word for a regular expression but not for a model:
    `clean` removes them, and the cleaned text is what is stored and sent;
  - compatibility forms and look-alikes (full-width letters, mathematical alphanumerics, combining
    marks, a Cyrillic "о" or Greek "ο" for a Latin "o"): `readings` folds them to plain Latin letters
    (Unicode NFKC, marks dropped, and the Latin letter of each look-alike from Unicode's confusables
    data), and `mixed_script_word` finds a word that mixes scripts to look like a Latin one;
  - digits and signs used as letters ("Y0u must ignore the rubr1c"): `readings` also reads each word
    that mixes letters with digits with the digits as letters (1 as i and as l).

Text under a right-to-left override is read both in logical order (as a model reads it) and reversed
(as it is displayed), and Unicode tag characters also as the ASCII they spell. The checks run on
every reading; the stored text is only cleaned.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

# Invisible characters that are not of category Cf (format), which `clean` also removes: combining
# grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian variation selectors, braille blank,
# variation selectors.
_INVISIBLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\uffa0\ufe00-\ufe0f"
                        "\U000e0100-\U000e01ef]")
# Control characters a criterion cannot hold: C0/C1 controls (newline, tab, ...) and the line and
# paragraph separators. They are refused, not removed: a criterion is one line.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_RLO, _PDF = "\u202e", "\u202c"
# A written escape ("\\n", "\\t") that a model may read as the space it stands for; not a LaTeX command
# such as "\\nu" or "\\times".
_ESCAPED_SPACE = re.compile(r"\\[ntr](?![a-z])")
# Unicode tag characters (U+E0020..U+E007E) spell ASCII invisibly, and some models read them.
TAG_CHARS = re.compile("[\U000e0020-\U000e007e]")
_TAG_ASCII = {c: c - 0xE0000 for c in range(0xE0020, 0xE007F)}
# Digits and signs read as the letters they stand for, inside a word that also has letters.
_LEET = {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "6": "g", "7": "t", "8": "b", "9": "g", "@": "a",
         "$": "s", "|": "l", "!": "i", "+": "t"}
_LEET_WORD = re.compile(r"[\w@$|!+]*[0-9@$|!+][\w@$|!+]*")
_CJK = {"HAN", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO"}
_NEUTRAL = {"COMMON", "INHERITED", "Unknown"}


def is_invisible(ch: str) -> bool:
    """Whether a character has no glyph: a format character (zero-width space and joiners, soft hyphen, bidi
    marks: category Cf) or one of the other invisible characters above."""
    return unicodedata.category(ch) == "Cf" or _INVISIBLE.match(ch) is not None


def tags_as_ascii(text: str) -> str:
    """The text with its tag characters as the ASCII they spell (some models read them so), one for one."""
    return text.translate(_TAG_ASCII)


def clean(text: str) -> str:
    """The text as stored and sent: NFC, invisible and format characters removed, outer space stripped."""
    return "".join(ch for ch in unicodedata.normalize("NFC", text) if not is_invisible(ch)).strip()


def _fold(text: str) -> str:
    """NFKC with combining marks dropped: full-width, mathematical and accented letters become plain."""
    decomposed = unicodedata.normalize("NFKD", text)
    bare = "".join(ch for ch in decomposed if unicodedata.category(ch) not in ("Mn", "Me"))
    return unicodedata.normalize("NFKC", bare)


@cache
def _latin_lookalike(ch: str) -> str:
    """The ASCII letter a non-ASCII letter looks like (Unicode confusables), or the letter itself."""
    from confusable_homoglyphs import confusables  # 70 ms to load: only for text that is not ASCII

    for glyph in confusables.confusables_data.get(ch, ()):
        if len(glyph["c"]) == 1 and glyph["c"].isascii() and glyph["c"].isalpha():
            return glyph["c"]
    return ch


def _script(ch: str) -> str:
    from confusable_homoglyphs import categories

    script = categories.alias(ch)
    return "CJK" if script in _CJK else script


def _skeleton(text: str) -> str:
    return "".join(_latin_lookalike(ch) if not ch.isascii() and ch.isalpha() else ch for ch in text)


def _leet(text: str, one: str) -> str:
    def word(match: re.Match[str]) -> str:
        w = match.group()
        if not any(ch.isalpha() for ch in w):
            return w  # a number stays a number: "score 1" is read as it is
        return "".join(one if ch == "1" else _LEET.get(ch, ch) for ch in w)

    return _LEET_WORD.sub(word, text)


def _visual(text: str) -> str:
    """Spans under a right-to-left override reversed, as they are displayed."""
    out, rest = [], text
    while _RLO in rest:
        head, _, tail = rest.partition(_RLO)
        span, _, rest = tail.partition(_PDF)
        out += [head, span[::-1]]
    return "".join([*out, rest])


def readings(text: str) -> list[str]:
    """The forms the checks read: the folded text with look-alikes as Latin letters (and a written
    escape such as "\\n" as a space), then the same
    with digits as letters (1 as i, then as l), then the displayed order of right-to-left overrides,
    then the ASCII that tag characters spell."""
    folded = _skeleton(_fold(clean(_ESCAPED_SPACE.sub(" ", text))))
    forms = [folded, _leet(folded, "i"), _leet(folded, "l")]
    if _RLO in text:
        visual = _skeleton(_fold(clean(_visual(text))))
        forms += [visual, _leet(visual, "i")]
    if TAG_CHARS.search(text):
        forms.append(_skeleton(_fold(clean(tags_as_ascii(text)))))
    return list(dict.fromkeys(forms))


def mixed_script_word(text: str) -> tuple[str, list[str]] | None:
    """A word that mixes letters of several scripts with a look-alike among them (a Cyrillic "о" in
    "You"), and its scripts; None when there is none. Greek letters that look like no Latin letter
    beside Latin ones (Δx, μm) are notation, not a disguise."""
    if text.isascii():
        return None
    for word in re.findall(r"\w+", unicodedata.normalize("NFKC", clean(text))):
        letters = [ch for ch in word if ch.isalpha()]
        scripts = {_script(ch) for ch in letters} - _NEUTRAL
        if len(scripts) < 2:
            continue
        disguised = [ch for ch in letters if _script(ch) != "LATIN" and _latin_lookalike(ch) != ch]
        if scripts <= {"LATIN", "GREEK"} and not disguised:
            continue
        return word, sorted(s.title() for s in scripts)
    return None
