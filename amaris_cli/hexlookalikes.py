"""The characters that look like a hexadecimal digit (Unicode's confusables, UTS #39), as the digit.

A hash copied with look-alikes (a Cyrillic "а" for "a", a Greek "Ο" or a Latin "O" for "0", an "l" for
"1") is the same hash to a model that reads it. Generated from confusable-homoglyphs' data (each digit's
homoglyphs, and theirs where one is ASCII: "0" looks like "O", which looks like a Cyrillic "О"), leaving out
what NFKD and case folding already make the digit; tests/test_prompts.py checks the table against the data.
Kept as a table: the data takes 70 ms to load, and the scorer reads every rollout through it.
"""

from __future__ import annotations

import unicodedata

HEX_LOOKALIKES: dict[str, str] = {
    "0": ("O\u039f\u041e\u0555\u07c0\u09e6\u0b20\u0b66\u12d0\u2c9e\u2d54\u3007\ua4f3\uff2f\U00010292"
          "\U000102ab\U00010404\U000104c2\U00010516\U000114d0\U000118b5\U000118e0\U0001d40e\U0001d442"
          "\U0001d476\U0001d4aa\U0001d4de\U0001d512\U0001d546\U0001d57a\U0001d5ae\U0001d5e2\U0001d616"
          "\U0001d64a\U0001d67e\U0001d6b6\U0001d6f0\U0001d72a\U0001d764\U0001d79e"),
    "1": ("Il|\u0196\u01c0\u0399\u0406\u04c0\u05c0\u05d5\u05df\u0627\u0661\u06f1\u07ca\u16c1\u2110"
          "\u2111\u2113\u2160\u217c\u2223\u23fd\u2c92\u2d4f\ua4f2\ufe8d\ufe8e\uff29\uff4c\uffe8"
          "\U0001028a\U00010309\U00010320\U00016f28\U0001d408\U0001d425\U0001d43c\U0001d459\U0001d470"
          "\U0001d48d\U0001d4c1\U0001d4d8\U0001d4f5\U0001d529\U0001d540\U0001d55d\U0001d574\U0001d591"
          "\U0001d5a8\U0001d5c5\U0001d5dc\U0001d5f9\U0001d610\U0001d62d\U0001d644\U0001d661\U0001d678"
          "\U0001d695\U0001d6b0\U0001d6ea\U0001d724\U0001d75e\U0001d798\U0001e8c7\U0001ee00\U0001ee80"),
    "2": "\u01a7\u03e8\u14bf\ua644\ua6ef\ua75a",
    "3": "\u01b7\u021c\u0417\u04e0\u2ccc\ua76a\ua7ab\U000118ca\U00016f3b\U0001d206",
    "4": "\u13ce\U000118af",
    "5": "\u01bc\U000118bb",
    "6": "\u0431\u13ee\u2cd2\U000118d5",
    "7": "\U000104d2\U000118c6\U0001d212",
    "8": "\u0222\u0223\u09ea\u0a6a\u0b03\U0001031a\U0001e8cb",
    "9": "\u09ed\u0a67\u0b68\u0d6d\u2cca\ua76e\U000118ac\U000118cc\U000118d6",
    "a": ("\u0251\u0391\u03b1\u0410\u0430\u13aa\u15c5\u237a\ua4ee\U000102a0\U00016f40\U0001d6a8"
          "\U0001d6c2\U0001d6e2\U0001d6fc\U0001d71c\U0001d736\U0001d756\U0001d770\U0001d790\U0001d7aa"),
    "b": ("\u0184\u0392\u0412\u042c\u13cf\u13f4\u1472\u15af\u15f7\ua4d0\ua7b4\U00010282\U000102a1"
          "\U00010301\U0001d6a9\U0001d6e3\U0001d71d\U0001d757\U0001d791"),
    "c": ("\u03f2\u03f9\u0421\u0441\u13df\u1d04\u2ca4\u2ca5\ua4da\uabaf\U000102a2\U00010302\U00010415"
          "\U0001043d\U0001051c\U000118e9\U000118f2\U0001f74c"),
    "d": "\u0501\u13a0\u13e7\u146f\u15de\u15ea\ua4d2\ua4d3",
    "e": ("\u0395\u0415\u0435\u04bd\u13ac\u212e\u22ff\u2d39\ua4f0\uab32\U00010286\U000118a6\U000118ae"
          "\U0001d6ac\U0001d6e6\U0001d720\U0001d75a\U0001d794"),
    "f": ("\u017f\u03dc\u0584\u15b4\u1e9d\ua4dd\ua798\ua799\uab35\U00010287\U000102a5\U00010525"
          "\U000118a2\U000118c2\U0001d213\U0001d7ca"),
}

# The digits of other scripts (Devanagari "४", Arabic-Indic "٤") and the dingbat digits ("❶", "➀"): not look-alikes,
# but digits a model reads as the digit they are, and none holds ASCII in any form. (first code point, last, the first
# one's digit) of each run, from Unicode 14.0 (Python 3.11's; tests/test_prompts.py checks them against the
# interpreter's data). Where one also looks like another digit or letter ("٥" like an "o"), the look-alike reading
# stands.
OTHER_DIGIT_RUNS = (
    (0x660, 0x669, 0), (0x6F0, 0x6F9, 0), (0x7C0, 0x7C9, 0), (0x966, 0x96F, 0), (0x9E6, 0x9EF, 0), (0xA66, 0xA6F, 0),
    (0xAE6, 0xAEF, 0), (0xB66, 0xB6F, 0), (0xBE6, 0xBEF, 0), (0xC66, 0xC6F, 0), (0xCE6, 0xCEF, 0), (0xD66, 0xD6F, 0),
    (0xDE6, 0xDEF, 0), (0xE50, 0xE59, 0), (0xED0, 0xED9, 0), (0xF20, 0xF29, 0), (0x1040, 0x1049, 0),
    (0x1090, 0x1099, 0), (0x1369, 0x1371, 1), (0x17E0, 0x17E9, 0), (0x1810, 0x1819, 0), (0x1946, 0x194F, 0),
    (0x19D0, 0x19D9, 0), (0x19DA, 0x19DA, 1), (0x1A80, 0x1A89, 0), (0x1A90, 0x1A99, 0), (0x1B50, 0x1B59, 0),
    (0x1BB0, 0x1BB9, 0), (0x1C40, 0x1C49, 0), (0x1C50, 0x1C59, 0), (0x24F5, 0x24FD, 1), (0x24FF, 0x24FF, 0),
    (0x2776, 0x277E, 1), (0x2780, 0x2788, 1), (0x278A, 0x2792, 1), (0xA620, 0xA629, 0), (0xA8D0, 0xA8D9, 0),
    (0xA900, 0xA909, 0), (0xA9D0, 0xA9D9, 0), (0xA9F0, 0xA9F9, 0), (0xAA50, 0xAA59, 0), (0xABF0, 0xABF9, 0),
    (0x104A0, 0x104A9, 0), (0x10A40, 0x10A43, 1), (0x10D30, 0x10D39, 0), (0x10E60, 0x10E68, 1),
    (0x11052, 0x1105A, 1), (0x11066, 0x1106F, 0), (0x110F0, 0x110F9, 0), (0x11136, 0x1113F, 0),
    (0x111D0, 0x111D9, 0), (0x112F0, 0x112F9, 0), (0x11450, 0x11459, 0), (0x114D0, 0x114D9, 0),
    (0x11650, 0x11659, 0), (0x116C0, 0x116C9, 0), (0x11730, 0x11739, 0), (0x118E0, 0x118E9, 0),
    (0x11950, 0x11959, 0), (0x11C50, 0x11C59, 0), (0x11D50, 0x11D59, 0), (0x11DA0, 0x11DA9, 0),
    (0x16A60, 0x16A69, 0), (0x16AC0, 0x16AC9, 0), (0x16B50, 0x16B59, 0), (0x1E140, 0x1E149, 0),
    (0x1E2F0, 0x1E2F9, 0), (0x1E950, 0x1E959, 0),
)
OTHER_DIGITS = {chr(c): str(digit + c - first) for first, last, digit in OTHER_DIGIT_RUNS for c in range(first, last + 1)}

# each look-alike, and each digit of another script, to its digit
TO_HEX_CHARS = {**OTHER_DIGITS, **{ch: digit for digit, chars in HEX_LOOKALIKES.items() for ch in chars}}
# The digits of other scripts that TO_HEX_CHARS reads as the look-alike they also are (a Bengali "\u09ea" is a 4, and
# looks like an 8): a model that knows the script reads the digit, one that does not the look-alike, so a text that
# holds one is read both ways (prompts._without_tag), this table giving the digit's reading, one character for one.
AMBIGUOUS_DIGITS = {ch: digit for ch, digit in OTHER_DIGITS.items() if TO_HEX_CHARS[ch] != digit}
AS_DIGITS = str.maketrans(AMBIGUOUS_DIGITS)

# The characters that decompose (NFKD) to a non-ASCII look-alike and marks (a Greek "ά" is "α" and a tonos; checked
# by a test against NFKD): a text is decomposed after its look-alikes are read, so these are read as their
# decomposition, with the look-alike as its digit ("ά" as "a" and a tonos). Not a ligature that has one among other
# letters (an Arabic "ﻻ" is lam and alef, "ﷺ" 18 characters): a reader sees one glyph, not a digit in it.
DECOMPOSES_TO_LOOKALIKE = (
    "\u01ee\u0386\u0388\u038a\u038c\u03aa\u03ac\u0400\u0401\u0407\u0450\u0451\u04d0"
    "\u04d1\u04d2\u04d3\u04d6\u04d7\u04de\u04e6\u0622\u0623\u0625\u1d3d\u1d45\u1f00"
    "\u1f01\u1f02\u1f03\u1f04\u1f05\u1f06\u1f07\u1f08\u1f09\u1f0a\u1f0b\u1f0c\u1f0d"
    "\u1f0e\u1f0f\u1f18\u1f19\u1f1a\u1f1b\u1f1c\u1f1d\u1f38\u1f39\u1f3a\u1f3b\u1f3c"
    "\u1f3d\u1f3e\u1f3f\u1f48\u1f49\u1f4a\u1f4b\u1f4c\u1f4d\u1f70\u1f71\u1f80\u1f81"
    "\u1f82\u1f83\u1f84\u1f85\u1f86\u1f87\u1f88\u1f89\u1f8a\u1f8b\u1f8c\u1f8d\u1f8e"
    "\u1f8f\u1fb0\u1fb1\u1fb2\u1fb3\u1fb4\u1fb6\u1fb7\u1fb8\u1fb9\u1fba\u1fbb\u1fbc"
    "\u1fc8\u1fc9\u1fd8\u1fd9\u1fda\u1fdb\u1ff8\u1ff9\u2224\ufb35\ufb4b\ufd3c\ufd3d"
    "\ufe81\ufe82\ufe83\ufe84\ufe87\ufe88\U000107b6"
)

_DIGITS = str.maketrans(TO_HEX_CHARS)
# str.translate's table: each look-alike as its digit, and each character above as its decomposition so read
TO_HEX = str.maketrans({**TO_HEX_CHARS, **{ch: unicodedata.normalize("NFKD", ch).translate(_DIGITS)
                                          for ch in DECOMPOSES_TO_LOOKALIKE}})
# the same for ASCII text alone (its look-alikes are ASCII: "O", "I", "l", "|")
ASCII_TO_HEX_CHARS = {ch: digit for ch, digit in TO_HEX_CHARS.items() if ch.isascii()}
ASCII_TO_HEX = str.maketrans(ASCII_TO_HEX_CHARS)
