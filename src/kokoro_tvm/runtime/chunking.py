"""Input to utterances, by kokoro's own rules (``KPipeline``), and phonemes to token ids.

Why kokoro's rules, exactly: the decoder runs a bidirectional LSTM and instance norms over all
frames of an utterance, and the voice-pack row depends on the utterance's length
(``pack[len(ps) - 1]``), so any other cut changes the audio everywhere near it. An utterance here
is what kokoro hands to ``KModel`` in one call:

* a phoneme string of at most 510 symbols is one utterance, as ``generate_from_tokens(str)``
  takes it;
* longer phonemes (which kokoro refuses) and misaki's tokens for ``--text`` are grouped as
  ``KPipeline.en_tokenize`` groups them: tokens accumulate until the next would pass 510
  phonemes, then the group ends after the last ``!.?…`` (else ``:;``, else ``,—``; a following
  ``)``/``”`` stays with it) when what is left still fits, else right before that next token.

kokoro.pipeline imports torch, so the rules are re-implemented here on anything shaped like
misaki's ``MToken`` (``text``, ``phonemes``, ``whitespace``); ``tests/test_chunking.py`` proves
them equal to kokoro's. Phoneme strings become such tokens with ``phoneme_tokens``: each run of
non-space symbols is a word, and each punctuation mark its own token, as misaki emits them.

Beyond kokoro (``limit`` below 510, for a chunk that does not fit the largest built bucket, and
``first``, where a stream's first chunk may end early: ``options.Cuts``) the same rules apply at
the smaller size; a single token longer than the limit
(kokoro would truncate it and lose the rest) is cut at its inner spaces, else hard. kokoro's count
occasionally lets a group pass 510 by a symbol (kokoro then truncates it); no bucket holds that,
so the runtime cuts it further, saying so.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import errors
from .seams import join  # noqa: F401  (eval.e2e joins chunks with it)

BOUNDARY_ID = 0  # kokoro wraps every utterance in this pad token: [0, *ids, 0]
MAX_PHONEMES = 510  # kokoro's limit: context length 512 minus the two boundary tokens
WATERFALL = ("!.?…", ":;", ",—")  # KPipeline.waterfall_last, strongest break first
BUMPS = (")", "”")  # a closer right after the break stays with it
PUNCTUATION = frozenset(';:,.!?—…"“”()')  # marks misaki emits as tokens of their own
#: every mark of the waterfall: where ``first_clause`` may end the first chunk, and what a
#: run-on (``first_cut``) has none of
CLAUSE_MARKS = frozenset("".join(WATERFALL))
#: marks a G2P emits that the vocabulary lacks (espeak-ng keeps Spanish ``¿¡``): punctuation with
#: no sound, dropped as kokoro drops them, without a warning on every Spanish question
SILENT_MARKS = frozenset("¿¡")
FIRST_CLAUSE_LIMIT = 100  # phonemes: a first clause longer than this is not worth the cut
#: phonemes a stream's first chunk keeps of a run-on (``first_cut``): about a sentence, so that
#: text with no mark to end it starts as soon as a sentence would
RUN_ON_FIRST = 100
#: a chunk whose phonemes end with one of these (closing quotes and brackets aside) ends its
#: sentence; any other chunk followed by another was cut inside one
SENTENCE_ENDS = frozenset(".!?…。！？")
CLOSERS = "\"'”’)]}»」』）"


InputError = errors.InputError  # defined with the other errors, importable from the package


@dataclass
class Token:
    """A word or punctuation mark of phoneme input, shaped like misaki's ``MToken``.

    ``part_of`` names the token a hard cut came from, so its pieces report one word.
    """

    text: str
    phonemes: str
    whitespace: str = ""
    part_of: Any = field(default=None, repr=False, compare=False)


@dataclass
class Utterance:
    """What kokoro passes to ``KModel`` in one call, with the tokens it came from.

    ``phonemes`` is kokoro's ``ps``: the model reads its symbols and the voice row is
    ``pack[len(phonemes) - 1]``. ``tokens`` (misaki ``MToken``s for text, ``Token``s for
    phonemes) spell ``phonemes`` symbol by symbol: each token's phonemes, then one symbol for its
    whitespace; word timestamps rely on that. ``timed_words``: whether ``tokens`` are words to
    time; False for text in a language whose G2P gives phonemes without words (every one but
    English: kokoro times English words only), whose tokens only serve to cut it.
    ``cut_early``: the runtime ended it where kokoro's chunking would have gone on (a stream's
    cuts, ``options.Cuts``), so the silence that starts the next one is the runtime's too.
    """

    phonemes: str
    tokens: list = field(default_factory=list, repr=False)
    text: str = ""
    timed_words: bool = True
    #: the runtime ended it where kokoro would have gone on (``first_cut``, ``cut_first``)
    cut_early: bool = False


# -- phonemes -> tokens -------------------------------------------------------------------------


def normalize_phonemes(phonemes: str) -> str:
    """Surrounding whitespace removed, newlines/tabs as spaces; runs of spaces are kept (each is
    a token to kokoro). Raises ``InputError`` when nothing is left."""
    text = "".join(" " if c.isspace() else c for c in str(phonemes)).strip(" ")
    if not text:
        raise InputError("empty input: give at least one phoneme (e.g. --phonemes 'həlˈO')")
    return text


def phoneme_tokens(phonemes: str) -> list[Token]:
    """Tokens that spell ``phonemes`` exactly: words, punctuation marks, and a ``" "`` token for
    every space past the first of a run (so ``tokens_to_ps`` gives the string back)."""
    tokens: list[Token] = []
    word = ""
    for c in phonemes:
        if c == " ":
            if word:
                tokens.append(Token(word, word))
                word = ""
            if tokens and not tokens[-1].whitespace:
                tokens[-1].whitespace = " "
            else:
                tokens.append(Token(" ", " "))
        elif c in PUNCTUATION:
            if word:
                tokens.append(Token(word, word))
                word = ""
            tokens.append(Token(c, c))
        else:
            word += c
    if word:
        tokens.append(Token(word, word))
    return tokens


# -- kokoro's grouping ----------------------------------------------------------------------------


def _ps(t: Any) -> str:
    return t.phonemes or ""


def tokens_to_ps(tokens: Sequence[Any]) -> str:
    """kokoro's ``KPipeline.tokens_to_ps``: phonemes, one space per token with whitespace,
    stripped."""
    return "".join(_ps(t) + (" " if t.whitespace else "") for t in tokens).strip()


def tokens_to_text(tokens: Sequence[Any]) -> str:
    """kokoro's ``KPipeline.tokens_to_text``."""
    return "".join(t.text + t.whitespace for t in tokens).strip()


def waterfall_last(tokens: Sequence[Any], next_count: int, limit: int = MAX_PHONEMES) -> int:
    """How many of ``tokens`` the group keeps (``KPipeline.waterfall_last`` at ``limit``)."""
    for marks in WATERFALL:
        hits = [i for i, t in enumerate(tokens) if len(_ps(t)) == 1 and _ps(t) in marks]
        if not hits:
            continue
        z = hits[-1] + 1
        if z < len(tokens) and _ps(tokens[z]) in BUMPS:
            z += 1
        if next_count - len(tokens_to_ps(tokens[:z])) <= limit:
            return z
    return len(tokens)


def group_tokens(tokens: Iterable[Any], limit: int = MAX_PHONEMES) -> list[list[Any]]:
    """``KPipeline.en_tokenize``'s groups at ``limit`` phonemes (groups with no phonemes are
    dropped, as ``KPipeline`` skips them). Tokens longer than ``limit`` are cut first."""
    return list(iter_groups(tokens, limit))


def iter_groups(tokens: Iterable[Any], limit: int = MAX_PHONEMES) -> Iterator[list[Any]]:
    """``group_tokens`` one group at a time, pulling ``tokens`` only as far as the group that
    ends needs: text too long to phonemize at once is grouped as its tokens arrive."""
    group: list[Any] = []
    count = 0  # kokoro's pcount: phonemes so far, counting a pending space
    for t in _split_long(tokens, limit):
        piece = _ps(t) + (" " if t.whitespace else "")
        if count + len(piece.rstrip()) > limit:
            z = waterfall_last(group, count + len(piece.rstrip()), limit)
            if tokens_to_ps(group[:z]):
                yield group[:z]
            group = group[z:]
            count = len(tokens_to_ps(group))
            if not group:
                piece = piece.lstrip()
        group.append(t)
        count += len(piece)
    if tokens_to_ps(group):
        yield group


def split_long_tokens(tokens: Iterable[Any], limit: int) -> list[Any]:
    """Tokens, with any whose phonemes exceed ``limit`` cut into pieces (at its inner spaces
    when it has them, else every ``limit`` symbols). Not kokoro: it truncates such a token."""
    return list(_split_long(tokens, limit))


def _split_long(tokens: Iterable[Any], limit: int) -> Iterator[Any]:
    for t in tokens:
        rest = _ps(t)
        if len(rest) <= limit:
            yield t
            continue
        first = True
        while len(rest) > limit:
            k = rest.rfind(" ", 1, limit + 1)
            piece, space, rest = (
                (rest[:k], " ", rest[k + 1 :]) if k > 0 else (rest[:limit], "", rest[limit:])
            )
            yield Token(t.text if first else "", piece, space, part_of=t)
            first = False
        yield Token("", rest, t.whitespace, part_of=t)


def first_cut(tokens: Sequence[Any], first: str = "clause") -> int:
    """How many tokens make the first chunk when it may end early (``options.Cuts.first``):
    through the first ``!.?…`` (``sentence``) or the first ``,;:.!?—…`` within
    ``FIRST_CLAUSE_LIMIT`` phonemes (``clause``), a closer after it included; 0 when there is
    none, or nothing would follow it, or ``first`` is ``none``.

    ``sentence`` on a run-on, 510 phonemes without a single mark of kokoro's waterfall: the
    first ``RUN_ON_FIRST`` phonemes or so (``run_on_cut``). kokoro cuts such text at whatever
    word reaches 510, about half a minute of speech that the listener would otherwise wait for
    whole; one more cut at a word is what kokoro's own cut there already is."""
    if first == "none":
        return 0
    marks, limit = (
        (WATERFALL[0], MAX_PHONEMES) if first == "sentence" else (CLAUSE_MARKS, FIRST_CLAUSE_LIMIT)
    )
    run_on = first == "sentence"
    for i, t in enumerate(tokens):
        if len(tokens_to_ps(tokens[: i + 1])) > limit:
            return run_on_cut(tokens) if run_on else 0
        run_on = run_on and not (len(_ps(t)) == 1 and _ps(t) in CLAUSE_MARKS)
        if len(_ps(t)) == 1 and _ps(t) in marks:
            z = i + 1
            while z < len(tokens) and (_ps(tokens[z]) in BUMPS or _ps(tokens[z]) in marks):
                z += 1
            return z if tokens_to_ps(tokens[z:]) else 0
    return 0


def run_on_cut(tokens: Sequence[Any]) -> int:
    """How many ``tokens`` a stream's first chunk of a run-on keeps: ``cut_first``'s chunk of
    ``RUN_ON_FIRST`` phonemes (the last word that fits, not a short one like "the"); 0 when no
    whole word fits or nothing would follow."""
    utt = Utterance(tokens_to_ps(tokens), list(tokens), tokens_to_text(tokens))
    head, rest = cut_first(utt, RUN_ON_FIRST)
    z = len(head.tokens)
    whole_words = all(a is b for a, b in zip(head.tokens, tokens))  # no word was split
    return z if rest is not None and whole_words and z < len(tokens) else 0


def ends_sentence(phonemes: str) -> bool:
    """Whether an utterance ends its sentence (a cut after it falls where kokoro pauses)."""
    return phonemes.rstrip().rstrip(CLOSERS)[-1:] in SENTENCE_ENDS


def utterances_from_tokens(
    tokens: Sequence[Any], limit: int = MAX_PHONEMES, first: str = "none"
) -> list[Utterance]:
    """kokoro's utterances for one paragraph of tokens; ``first``: where the first may end
    early (``first_cut``)."""
    z = first_cut(tokens, first)
    head = [Utterance(tokens_to_ps(tokens[:z]), list(tokens[:z]), tokens_to_text(tokens[:z]))]
    head[0].cut_early = True
    groups = group_tokens(tokens[z:], limit)
    rest = [Utterance(tokens_to_ps(g), g, tokens_to_text(g)) for g in groups if tokens_to_ps(g)]
    return head + rest if z else rest


def phoneme_utterances(phonemes: str, first: str = "none") -> list[Utterance]:
    """Phoneme input as kokoro runs it: one utterance up to 510 symbols, else its grouping
    (``first``: where the first utterance may end early, ``first_cut``)."""
    text = normalize_phonemes(phonemes)
    tokens = phoneme_tokens(text)
    if len(text) <= MAX_PHONEMES and not first_cut(tokens, first):
        return [Utterance(text, tokens, text)]
    return utterances_from_tokens(tokens, MAX_PHONEMES, first)


def split_utterance(utt: Utterance, limit: int) -> list[Utterance]:
    """``utt`` regrouped into pieces of at most ``limit`` phonemes (a chunk bigger than the
    largest bucket). kokoro's count can let a group pass its limit by a symbol or two; such a
    group is regrouped at a smaller limit, so every piece fits and splitting always ends."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    out: list[Utterance] = []
    for piece in utterances_from_tokens(utt.tokens, limit):
        piece.timed_words = utt.timed_words
        out += [piece] if len(piece.phonemes) <= limit else split_utterance(piece, limit - 1)
    return out


def limit_chunks(utts: Sequence[Utterance], limits: int | Sequence[int]) -> list[Utterance]:
    """Utterances recut so that the i-th has at most ``limits[i]`` phonemes (the last limit holds
    for every later one; an int caps them all): ``cut_first`` over and over."""
    caps = (limits,) if not isinstance(limits, (tuple, list)) else tuple(limits)
    if not caps or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in caps):
        raise InputError(
            f"chunk_limits must be a positive number of phonemes or a sequence of them "
            f"(e.g. 150, or (24, 60, 150)), got {limits!r}"
        )
    out: list[Utterance] = []
    pending = list(utts)
    while pending:
        first, rest = cut_first(pending.pop(0), caps[min(len(out), len(caps) - 1)])
        out.append(first)
        if rest is not None:
            pending.insert(0, rest)
    return out


def cut_first(utt: Utterance, cap: int) -> tuple[Utterance, Utterance | None]:
    """``utt`` as a first chunk of at most ``cap`` phonemes and the remainder (None when it fits).

    Why: a chunk is decoded in one uninterruptible call, so its length bounds how long every
    other stream sharing the cores waits, and a short first chunk is heard sooner. An utterance
    over its cap ends where kokoro's grouping ends a group of that size (the last sentence
    mark, else clause mark, that leaves a remainder within the cap; else at the last word
    that fits, but not after words of one or two phonemes, "the", "at", "to", which belong to
    what follows, when a longer word can end the chunk); punctuation that would start the
    remainder stays with this chunk, past the cap (a chunk of marks says nothing). Not kokoro's
    chunking: each cut changes the audio near it, as any cut does (module docstring)."""
    if len(utt.phonemes) <= cap or not utt.tokens:
        return utt, None
    first, *rest = split_utterance(utt, cap)
    tokens = [t for piece in rest for t in piece.tokens]
    marks = 0
    while marks < len(tokens) and _ps(tokens[marks]) and _ps(tokens[marks]) in PUNCTUATION:
        marks += 1
    kept = first.tokens + tokens[:marks]
    tokens = tokens[marks:]
    words = [t for t in kept if _ps(t).strip() and _ps(t) not in PUNCTUATION]
    while not marks and tokens and len(words) > 1 and kept[-1] is words[-1]:
        if len(_ps(words[-1])) > 2 or all(len(_ps(w)) <= 2 for w in words[:-1]):
            break
        # "plˈiz lˈiv | ðə pˈækɪʤ", not "plˈiz lˈiv ðə | pˈækɪʤ"
        kept, tokens, words = kept[:-1], [kept[-1], *tokens], words[:-1]
    if kept != first.tokens:
        first = replace(first, phonemes=tokens_to_ps(kept), tokens=kept, text=tokens_to_text(kept))
    if not tokens_to_ps(tokens):
        return first, None
    first.cut_early = True
    rest_ps, rest_text = tokens_to_ps(tokens), tokens_to_text(tokens)
    return first, replace(utt, phonemes=rest_ps, tokens=tokens, text=rest_text)


# -- symbols -> ids -------------------------------------------------------------------------------


def check_symbols(phonemes: str, vocab: dict[str, int], unknown: str = "warn") -> None:
    """Warn about (``warn``; kokoro drops them silently) or refuse (``error``) symbols outside
    the vocabulary; spaces are in it, and other whitespace was already normalised away."""
    if unknown not in ("warn", "error"):
        raise ValueError(f"unknown must be 'warn' or 'error', got {unknown!r}")
    bad = sorted({c for c in phonemes if c not in vocab and c not in SILENT_MARKS})
    if not bad:
        return
    msg = (
        f"{sum(c in bad for c in phonemes)} symbol(s) outside the Kokoro phoneme vocabulary: "
        f"{''.join(bad)!r} ({', '.join(f'U+{ord(c):04X}' for c in bad[:8])})"
    )
    if unknown == "error":
        raise InputError(f"{msg}; pass phonemes (misaki output), not text, or remove them")
    if not any(c in vocab and c != " " for c in phonemes):
        raise InputError(
            "no phoneme of the input is in the Kokoro vocabulary; pass phonemes (misaki "
            "output) with --phonemes, or text with --text"
        )
    warnings.warn(f"{msg} were dropped, as kokoro does", stacklevel=3)


def token_ids(phonemes: str, vocab: dict[str, int]) -> np.ndarray:
    """``[0, *ids, 0]`` as kokoro builds ``input_ids``: symbols outside the vocabulary dropped."""
    return np.array(
        [BOUNDARY_ID, *(vocab[c] for c in phonemes if c in vocab), BOUNDARY_ID], dtype=np.int64
    )
