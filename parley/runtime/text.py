"""What counts as something a person wrote: at least one visible character.

A message of only spaces, control characters (NUL), zero-width or other format characters
shows nothing to a reader and gives the model nothing to act on. Only the test is made here;
text that passes is stored exactly as sent, control characters and all."""

from __future__ import annotations

import unicodedata

# Letters and symbols that render as blank space.
_BLANK = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# Letters, numbers, punctuation and symbols show; so do private-use characters (icon fonts).
# Separators, controls, format characters (zero-width, bidi marks) and lone combining marks do not.
_VISIBLE_CLASSES = "LNPS"


def has_visible_text(text: str) -> bool:
    for ch in text:
        category = unicodedata.category(ch)
        if (category[0] in _VISIBLE_CLASSES or category == "Co") and ch not in _BLANK:
            return True
    return False


NO_VISIBLE_TEXT = "is empty or has no visible characters (only spaces, control or zero-width characters)"
