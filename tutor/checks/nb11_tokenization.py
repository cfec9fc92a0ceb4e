"""Checks for notebook 11: byte-pair encoding (count_pairs, merge_pair, train_bpe, BPETokenizer,
bits_per_byte). Every case uses a short text, so each check runs in a fraction of a second."""

import math

import regex
import torch

from tutor.checks import beside
from tutor.checks.compare import expect_equal
from tutor.checks.harness import LearnerError, Mismatch, NotDone, at, call, case, check, error_details, may_change
from tutor.course import catalog
from tutor.reference import bpe as ref

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)

EOT = "<|endoftext|>"


def _ids_list(got, what):
    if got is None:
        raise Mismatch(f"{what} returned None", hint="return the new list (did you forget `return`?)")
    if isinstance(got, torch.Tensor):
        raise Mismatch(f"{what} returned a tensor; it should return a list of ints", hint="build a Python list")
    if not isinstance(got, list):
        raise Mismatch(f"{what} returned {type(got).__name__}; it should return a list of ints",
                       hint=("return a list, e.g. `merged = []` ... `return merged`"
                             if isinstance(got, (tuple, str)) else None))
    return got


# --- count_pairs ---------------------------------------------------------------------------------


@check
def count_pairs(fn):
    cases = [[5, 6, 5, 6, 5, 6, 5], [1, 2, 3, 1, 2], [7, 7, 7], [104, 105], [42], []]
    with case("twice without `counts`", hint_on_error=None):
        first = call(fn, [1, 2], what="count_pairs([1, 2])")
        # a copy (a shared default dict changes with the second call); None when it is not a dict (no return, or
        # another type): the cases below say which
        first = dict(first) if isinstance(first, dict) else None
        second = call(fn, [1, 2], what="count_pairs([1, 2]) (a second call)") if first is not None else None
        if isinstance(second, dict) and dict(second) != {(1, 2): 1} and dict(second) != first:
            raise Mismatch("a second call without `counts` returns the counts of the first call added in",
                           [f"first call:  {first}", f"second call: {dict(second)} (expected {{(1, 2): 1}})"],
                           hint="`def count_pairs(ids, counts={})` shares one dict between all calls: "
                                "use counts=None and `if counts is None: counts = {}`")
    for ids in cases:
        with case(repr(ids)):
            before = list(ids)
            got = call(fn, ids, what=f"count_pairs({ids})")
            expected = ref.count_pairs(ids)
            if got is None:
                raise Mismatch("count_pairs returned None", hint="return the dictionary of counts")
            if not isinstance(got, dict):
                raise Mismatch(f"count_pairs returned {type(got).__name__}; it should return a dict {{(a, b): count}}")
            if ids != before:
                raise Mismatch("count_pairs changed the list it was given", hint="only read `ids`")
            got = dict(got)
            if got == expected:
                continue
            keys = list(got)
            if any(not (isinstance(k, tuple) and len(k) == 2) for k in keys):
                raise Mismatch("the keys should be pairs (a, b) of adjacent ids",
                               [f"expected {expected}", f"got      {got}"],
                               hint="loop over zip(ids, ids[1:]) and use each (a, b) tuple as the key")
            no_overlap, i = {}, 0
            while i < len(ids) - 1:
                no_overlap[(ids[i], ids[i + 1])] = no_overlap.get((ids[i], ids[i + 1]), 0) + 1
                i += 2 if ids[i] == ids[i + 1] else 1
            if got == no_overlap:
                raise Mismatch("overlapping pairs are not all counted", [f"expected {expected}", f"got      {got}"],
                               hint="count every adjacent pair, overlapping ones too: [7, 7, 7] holds (7, 7) twice")
            if got == {pair: 1 for pair in expected}:
                raise Mismatch("every pair is counted once, not as often as it occurs",
                               [f"expected {expected}", f"got      {got}"],
                               hint="add 1 to the pair's count each time you see it: "
                                    "counts[pair] = counts.get(pair, 0) + 1")
            if len(ids) > 1 and got == ref.count_pairs(ids + ids[:1]):
                raise Mismatch("a pair from the last id back to the first is counted",
                               [f"expected {expected}", f"got      {got}"],
                               hint="pairs are neighbours in the list; the list does not wrap around")
            if len(ids) > 1 and got == ref.count_pairs(ids[:-1]):
                raise Mismatch("the last pair is missing", [f"expected {expected}", f"got      {got}"],
                               hint="a list of n ids has n - 1 pairs: zip(ids, ids[1:]), or i in range(len(ids) - 1)")
            expect_equal(got, expected, f"count_pairs({ids})")
    with case("counts={(1, 2): 5, (9, 9): 1} given"):
        counts = {(1, 2): 5, (9, 9): 1}
        with may_change():  # the exercise asks for it
            got, returned = call(at(beside.returned_argument), fn, [1, 2, 3], counts,
                                 what="count_pairs([1, 2, 3], counts)")
        if returned != 1:
            raise Mismatch("with `counts` given, count_pairs must add to that dict in place and return it",
                           [f"returned {dict(got) if isinstance(got, dict) else got!r}", f"counts is now {counts}"],
                           hint="only create a new dict when counts is None; "
                                "otherwise update the one given and return it")
        if counts != {(1, 2): 6, (9, 9): 1, (2, 3): 1}:
            raise Mismatch("with `counts` given, the pairs must be added to the counts already there",
                           ["expected {(1, 2): 6, (9, 9): 1, (2, 3): 1}", f"got      {counts}"],
                           hint="counts[pair] = counts.get(pair, 0) + 1 adds; counts[pair] = 1 overwrites")
    return "{cases} cases"


# --- merge_pair ----------------------------------------------------------------------------------


@check
def merge_pair(fn):
    cases = [
        ([1, 2, 3, 1, 2], (1, 2), 256),
        ([5, 1, 2, 1, 2, 9], (1, 2), 257),
        ([7, 7, 7], (7, 7), 300),
        ([7, 7, 7, 7], (7, 7), 300),
        ([3, 4, 3, 4], (4, 3), 261),
        ([1, 2], (2, 1), 258),
        ([8, 9], (8, 9), 259),
        ([], (1, 2), 260),
        ([11, 22, 1, 2, 12, 1, 2], (1, 2), 300),
    ]
    for ids, pair, new_id in cases:
        label = f"merge_pair({ids}, {pair}, {new_id})"
        with case(label):
            before = list(ids)
            got = call(fn, ids, pair, new_id, what=label)
            if got is None and ids != before:
                raise Mismatch("merge_pair changed the list in place and returned None",
                               hint="build and return a new list; leave `ids` as it was")
            got = _ids_list(got, label)
            if ids != before:
                raise Mismatch("merge_pair changed the list it was given",
                               [f"ids was {before}, now {ids}"], hint="build a new list: merged = [] ... return merged")
            expected = ref.merge_pair(ids, pair, new_id)
            if got == expected:
                continue
            details = [f"expected {expected}", f"got      {got}"]
            if got in _by_string_replacement(ids, pair, new_id):
                raise Mismatch("the pair was replaced in a string of the ids, where it also matches inside other "
                               "ids ('11 22' contains '1 2')", details,
                               hint="compare ids, not text: walk the list with an index i and check "
                                    "ids[i] == pair[0] and ids[i + 1] == pair[1]")
            a, b = pair
            if ids[:3] == [7, 7, 7] and got == ref.merge_pair(ids[::-1], pair[::-1], new_id)[::-1]:
                raise Mismatch("the pairs are merged from the right", details,
                               hint="go left to right: [7, 7, 7] with (7, 7) gives [new_id, 7]")
            if ids[:3] == [7, 7, 7] and (got == _every_occurrence(ids, pair, new_id) or (
                    all(x in (7, new_id) for x in got) and len(got) < len(expected))):
                raise Mismatch("overlapping occurrences of the pair were merged: [7, 7, 7] holds (7, 7) at 0 and at 1, "
                               "and the two share the middle 7",
                               details, hint="go left to right and after a merge skip both ids (i += 2), so the next "
                                             "occurrence starts after it: [7, 7, 7] with (7, 7) gives [new_id, 7]")
            either, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) in (pair, (b, a)):
                    either.append(new_id)
                    i += 2
                else:
                    either.append(ids[i])
                    i += 1
            if a != b and got == either:
                raise Mismatch("(b, a) was merged as well as (a, b)", details,
                               hint="a pair is ordered: ids[i] == pair[0] and ids[i + 1] == pair[1]")
            if a != b and got == ref.merge_pair(ids, (b, a), new_id):
                raise Mismatch("the pair was matched the other way round", details,
                               hint="a pair is ordered: ids[i] == pair[0] and ids[i + 1] == pair[1]")
            first = list(ids)
            for i in range(len(ids) - 1):
                if (ids[i], ids[i + 1]) == pair:
                    first = ids[:i] + [new_id] + ids[i + 2:]
                    break
            if got == first:
                raise Mismatch("only the first occurrence is merged", details,
                               hint="keep going after a merge: every occurrence of the pair becomes new_id")
            no_skip, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    no_skip += [new_id, ids[i + 1]]
                    i += 2
                else:
                    no_skip.append(ids[i])
                    i += 1
            if got == no_skip:
                raise Mismatch("the second id of each pair is kept after new_id", details,
                               hint="skip both ids of the pair after a merge: append new_id, then i += 2")
            if len(got) > len(ids):
                raise Mismatch("the result is longer than the input: the pair's ids are kept as well as new_id",
                               details, hint="append new_id instead of the two ids of the pair, and skip both (i += 2)")
            if ids and got == expected[:-1]:
                raise Mismatch("the last id is missing", details,
                               hint="after the loop, an id left at the end still belongs to the result: "
                                    "loop while i < len(ids) and check i + 1 < len(ids) before looking at the pair")
            expect_equal(got, expected, label)
    return f"{len(cases)} cases"


def _every_occurrence(ids, pair, new_id):
    """Every place the pair starts becomes new_id, overlapping ones too: [7, 7, 7] -> [new_id, new_id]."""
    out = []
    for i in range(len(ids)):
        if tuple(ids[i:i + 2]) == pair:
            out.append(new_id)
        elif i == 0 or (ids[i - 1], ids[i]) != pair:
            out.append(ids[i])
    return out


def _by_string_replacement(ids, pair, new_id):
    """What replacing the pair in the ids written as text gives (with spaces, or as str(list))."""
    a, b = pair
    spaced = " ".join(map(str, ids)).replace(f"{a} {b}", str(new_id))
    listed = str(list(ids)).replace(f"{a}, {b}", str(new_id))
    out = []
    for text in (spaced, listed.strip("[]").replace(",", " ")):
        try:
            out.append([int(x) for x in text.split()])
        except ValueError:
            continue
    return out


# --- train_bpe -----------------------------------------------------------------------------------

TRAIN_TEXT = ("the cat sat on the mat. the cat ate the rat! that's that, isn't it? "
              "3 cats,  33 rats and 333 mats.\n\n  Then  the  end. ") * 2
TIE_TEXT = "ab ab cd cd xyz xyz"  # (a, b) and (c, d) tie: the greater, (c, d), comes first
SPECIAL_TEXT = ("to be<|endoftext|>or not<|endoftext|>to be<|endoftext|><|endoftext|>"
                "that is<|endoftext|>the question<|endoftext|>") * 3
# Letters and digits of every script, contractions only in lower case, runs of spaces (GPT-2's pattern).
PATTERN_TEXT = ("naïve café, Ça va? 日本語 Ελληνικά ٣٤٥ x² O'SULLIVAN and O'DONNELL said IT'S snake_case abc123 "
                "we'll   see,\n\n  then  done. ")
ONCE_TEXT = "the quick brown fox jumps over a lazy dog"  # almost every pair occurs once: they are merged all the same
TWO_SPECIALS = ("<|pad|>", EOT)  # given in this order, which is not sorted
GPT2_WITHOUT_CONTRACTIONS = r"""\p{L}+| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
WRONG_PATTERNS = [  # (the cause, a pattern a learner might write instead of GPT-2's)
    ("the spaces were dropped: the pre-tokenizer \\S+ (like str.split()) keeps only runs of non-space characters, "
     "so ' the' never occurs and punctuation stays on its word ('mat.'); GPT-2's pattern keeps the space before a "
     "word, the runs of white space and the punctuation as pre-tokens of their own: "
     "regex.findall(GPT2_PATTERN, text)", r"\S+"),
    ("the pre-tokenizer knows only ASCII letters and digits ([a-zA-Z], [0-9]): GPT-2's pattern has \\p{L} and \\p{N}, "
     "the letters and digits of every script (é, 日, ٣), which needs the `regex` package",
     r"""'(?:[sdmt]|ll|ve|re)| ?[a-zA-Z]+| ?[0-9]+| ?[^\sa-zA-Z0-9]+|\s+(?!\S)|\s+"""),
    ("the pre-tokenizer uses \\w for letters: \\w also matches digits and '_', so 'abc123' and 'snake_case' stay one "
     "pre-token; GPT-2's pattern keeps \\p{L}+ (letters) and \\p{N}+ (digits) apart",
     r"""'(?:[sdmt]|ll|ve|re)| ?\w+| ?[^\s\w]+|\s+(?!\S)|\s+"""),
    ("the contractions are matched case-insensitively (\"'S\" in \"O'SULLIVAN\" or \"IT'S\"): GPT-2's pattern is "
     "case-sensitive, '(?:[sdmt]|ll|ve|re) matches only lower case (GPT-4's pattern is the one with (?i:...))",
     r"""(?i:'(?:[sdmt]|ll|ve|re))| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""),
    ("the pre-tokenizer has no contractions: GPT-2's pattern starts with '(?:[sdmt]|ll|ve|re), so \"'s\" is one "
     "pre-token", GPT2_WITHOUT_CONTRACTIONS.replace(r"\p{L}+| ?\p{L}+", r" ?\p{L}+", 1)),
    ("the pattern lacks the look-ahead \\s+(?!\\S): a run of spaces before a word leaves its last space to the word "
     "(\"  the\" is \" \" + \" the\")", r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+"""),
]
COMPILED_PATTERNS = [(cause, regex.compile(pattern)) for cause, pattern in WRONG_PATTERNS]
TRAIN_CASES = [
    ("a short English text, vocab_size=290", TRAIN_TEXT, 290, ()),
    ("ties, vocab_size=262", TIE_TEXT, 262, ()),
    ("a text with the special token <|endoftext|>, vocab_size=272", SPECIAL_TEXT, 272, (EOT,)),
    ("letters and digits of many scripts, contractions, spaces, vocab_size=330", PATTERN_TEXT * 2, 330, ()),
    ("pairs that occur only once, vocab_size=290", ONCE_TEXT, 290, ()),
    ("two special tokens given as ['<|pad|>', '<|endoftext|>'], vocab_size=266", SPECIAL_TEXT + "<|pad|>", 266,
     TWO_SPECIALS),
]


def _state_before(text, special_tokens, merges):
    """The reference's pre-tokens (as id lists), their counts and the vocab after ``merges``."""
    counts = ref.pretoken_counts(text, list(special_tokens))
    words, freqs = [list(token.encode("utf-8")) for token in counts], list(counts.values())
    vocab = {i: bytes([i]) for i in range(256)}
    by_bytes = {bytes([i]): i for i in range(256)}
    for a, b in merges:
        new_id = len(vocab)
        pair = (by_bytes[a], by_bytes[b])
        words = [ref.merge_pair(w, pair, new_id) for w in words]
        vocab[new_id] = a + b
        by_bytes[a + b] = new_id
    counts, unweighted = {}, {}
    for w, f in zip(words, freqs):
        for pair, n in ref.count_pairs(w).items():
            counts[(vocab[pair[0]], vocab[pair[1]])] = counts.get((vocab[pair[0]], vocab[pair[1]]), 0) + n * f
            unweighted[(vocab[pair[0]], vocab[pair[1]])] = unweighted.get((vocab[pair[0]], vocab[pair[1]]), 0) + n
    return counts, unweighted, by_bytes


def _diagnose_merge(text, special_tokens, merges, k, got_pair, expected_pair, got_merges=()):
    """Why merge ``k`` is ``got_pair`` instead of ``expected_pair``: a hint, or None."""
    counts, unweighted, by_bytes = _state_before(text, special_tokens, merges[:k])
    merged = got_pair[0] + got_pair[1]
    if any(b" " in x + y for x, y in merges) and not any(b" " in x + y for x, y in got_merges):
        return ("the spaces were dropped: GPT-2's pre-tokens keep the space before a word (' the'); split with "
                "the pattern, regex.findall(GPT2_PATTERN, text), not with str.split()")
    if got_pair not in counts:
        if any(s.encode()[i:i + 2] == merged[:2] or merged in s.encode()
               for s in special_tokens for i in range(len(s))):
            return ("a special token was counted and merged: split the text on the special tokens first and "
                    "count nothing inside them (or across them)")
        pieces = [p for p, special in ref.split_on_special(text, special_tokens) if not special]
        joined = "".join(pieces).encode()
        if special_tokens and merged in joined and all(merged not in p.encode() for p in pieces):
            return ("a pair across a special token was counted: the text on each side of a special token is "
                    "pre-tokenized on its own, never joined")
        if any(ch in merged.strip() for ch in b" \n") or merged.endswith((b" ", b"\n")) and not merged.strip() == b"":
            return ("pairs are counted across pre-tokens (or without pre-tokenizing): split the text with GPT-2's "
                    "pattern first and count pairs only inside each pre-token")
        return ("this pair never occurs inside one of GPT-2's pre-tokens: pre-tokenize with the pattern "
                "(regex.findall(GPT2_PATTERN, text)) and count pairs only inside each pre-token")
    if counts[got_pair] == counts[expected_pair]:
        tied = [p for p in counts if counts[p] == counts[expected_pair]]
        if got_pair == min(tied):
            return ("a tie was broken the wrong way: among the most frequent pairs take the lexicographically "
                    "greater one, compared as (bytes, bytes): "
                    "max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))")
        if got_pair == max(tied, key=lambda p: (by_bytes[p[0]], by_bytes[p[1]])):
            return ("a tie was broken by comparing ids: compare the pairs' bytes, (vocab[a], vocab[b]), "
                    "not their ids")
        if got_pair == max(tied, key=lambda p: p[0] + p[1]):
            return (f"a tie was broken by comparing the two tokens joined, vocab[a] + vocab[b] "
                    f"({got_pair[0] + got_pair[1]!r} against {expected_pair[0] + expected_pair[1]!r}); the rule "
                    f"compares them as a pair, (vocab[a], vocab[b]), the first tokens first: {expected_pair!r} wins "
                    f"because {expected_pair[0]!r} > {got_pair[0]!r}")
        tie = (f"{got_pair!r} and {expected_pair!r} both occur {counts[got_pair]} times; the rule takes the "
               "lexicographically greater pair compared as (bytes, bytes): "
               "max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))")
        if got_pair == tied[0]:
            return "a tie was broken by which pair came first (max returns the first of equal counts): " + tie
        return "a tie was broken another way than the rule's: " + tie
    if counts[got_pair] < counts[expected_pair]:
        if max(unweighted.values()) == unweighted.get(got_pair):
            return ("each distinct pre-token is counted once: weight its pairs by how often the pre-token occurs")
        return f"({got_pair!r} occurs {counts[got_pair]} times, {expected_pair!r} {counts[expected_pair]} times)"
    return None


def _count_before(text, special_tokens, merges, k):
    """How often merge ``k`` occurs once the merges before it are made."""
    counts, _, _ = _state_before(text, special_tokens, merges[:k])
    return counts.get(merges[k], 0)


def _name_training_mistake(got, text, vocab_size, special_tokens):
    """The cause of wrong merges that a whole training run shows: a pre-tokenizer other than GPT-2's, or code
    points taken for bytes. None when it is neither."""
    _, merges = got
    for cause, pattern in COMPILED_PATTERNS:
        if merges == ref.train_bpe_naive(text, vocab_size, list(special_tokens), pattern=pattern)[1]:
            return cause
    utf8, latin1 = text.encode("utf-8"), text.encode("latin-1", errors="ignore")
    if any(a + b not in utf8 and a + b in latin1 for a, b in merges):
        return ("the characters' code points (ord(c)) were used instead of the UTF-8 bytes: a pre-token's ids are "
                "list(word.encode('utf-8')), and 'é' is two bytes")
    return None


def _expect_train_result(got, text, vocab_size, special_tokens, label):
    expected_vocab, expected_merges = ref.train_bpe(text, vocab_size, list(special_tokens))
    if not (isinstance(got, tuple) and len(got) == 2):
        raise Mismatch(f"{label} should return a tuple (vocab, merges), got {type(got).__name__}",
                       hint="return vocab, merges")
    vocab, merges = got
    if not isinstance(vocab, dict):
        raise Mismatch(f"vocab should be a dict {{id: bytes}}, got {type(vocab).__name__}")
    if not isinstance(merges, list):
        raise Mismatch(f"merges should be a list of (bytes, bytes) pairs, got {type(merges).__name__}",
                       hint=("merges.append((vocab[a], vocab[b])) after each merge"
                             if isinstance(merges, dict) else None))
    odd = next((m for m in merges if not (isinstance(m, tuple) and len(m) == 2
                                          and all(isinstance(x, bytes) for x in m))), None)
    if odd is not None:
        hint = ("store the bytes of the two tokens, (vocab[a], vocab[b]), not their ids"
                if isinstance(odd, tuple) and all(isinstance(x, int) for x in odd) else None)
        raise Mismatch(f"every merge should be a pair (bytes, bytes), got {odd!r}", hint=hint)
    odd = next((v for v in vocab.values() if not isinstance(v, bytes)), None)
    if odd is not None:
        raise Mismatch(f"vocab's values should be bytes, got a {type(odd).__name__}: {odd!r:.30}",
                       hint="bytes([i]) for the single bytes, vocab[a] + vocab[b] for a merge, "
                            "token.encode('utf-8') for a special token")
    specials = [s.encode() for s in special_tokens]
    if specials and any(vocab.get(i) == s for i, s in enumerate(specials)) and vocab.get(0) != b"\x00":
        raise Mismatch("the special tokens were given the first ids",
                       [f"vocab[0] = {vocab.get(0)!r}"],
                       hint="ids 0-255 are the single bytes (id = byte value), then the merges, "
                            "then the special tokens")
    wrong_byte = next((i for i in range(256) if vocab.get(i) != bytes([i])), None)
    if wrong_byte is not None:
        raise Mismatch(f"vocab[{wrong_byte}] should be the single byte {bytes([wrong_byte])!r}, "
                       f"got {vocab.get(wrong_byte)!r}",
                       hint="start from vocab = {i: bytes([i]) for i in range(256)}")
    if merges != expected_merges:
        cause = _name_training_mistake(got, text, vocab_size, special_tokens)
        if cause is not None:
            k = next((k for k, (a, b) in enumerate(zip(merges, expected_merges)) if a != b),
                     min(len(merges), len(expected_merges)))
            shown = [f"expected {expected_merges[k]!r}, got {merges[k]!r}" if k < len(merges) and k < len(
                expected_merges) else f"{len(merges)} merges, expected {len(expected_merges)}"]
            raise Mismatch(f"merge {k} (id {256 + k}) is wrong", shown, cause)
    if len(merges) < len(expected_merges) and merges == expected_merges[:len(merges)] and \
            _count_before(text, special_tokens, expected_merges, len(merges)) == 1:
        raise Mismatch(f"training stopped after {len(merges)} merges, expected {len(expected_merges)}",
                       [f"the next merge, {expected_merges[len(merges)]!r}, occurs only once"],
                       hint="a pair that occurs only once is still merged: keep going until vocab_size is reached "
                            "or no pair is left (a count of 1 is not a reason to stop)")
    if len(vocab) != len(expected_vocab):
        diff = len(vocab) - len(expected_vocab)
        hint = ("vocab_size counts all three kinds of ids: 256 bytes + merges + special tokens, so learn "
                "vocab_size - 256 - len(special_tokens) merges")
        if abs(diff) == 1:
            hint = "vocab_size is off by one: " + hint
        raise Mismatch(f"vocab has {len(vocab)} entries, expected {len(expected_vocab)} (vocab_size={vocab_size})",
                       [f"{len(merges)} merges, expected {len(expected_merges)}"], hint=hint)
    n_merges = len(expected_merges)
    if specials:
        tail = [vocab.get(i) for i in range(256 + len(merges), 256 + len(merges) + len(specials))]
        if tail != specials:
            early = [vocab.get(i) for i in range(256, 256 + len(specials))]
            hint = ("the special tokens come last, after the merges"
                    if early == specials else "each special token gets one id after the merges, in the order given")
            if sorted(tail, key=lambda t: t or b"") == sorted(specials) and tail != specials:
                hint = "the special tokens were numbered in sorted order; number them in the order given"
            raise Mismatch("the special tokens do not have the last ids",
                           [f"expected {specials} at the end, got {tail}"], hint)
    for k, (got_pair, expected_pair) in enumerate(zip(merges, expected_merges)):
        if got_pair != expected_pair:
            hint = _diagnose_merge(text, special_tokens, expected_merges, k, got_pair, expected_pair, merges)
            raise Mismatch(f"merge {k} (id {256 + k}) is wrong",
                           [f"expected {expected_pair!r}, got {got_pair!r}",
                            f"merges before it: {expected_merges[:k][-6:]}"],
                           hint)
    for i in range(256, 256 + n_merges):
        a, b = merges[i - 256]
        if vocab[i] != a + b:
            raise Mismatch(f"vocab[{i}] should be the two merged tokens joined, {a + b!r}, got {vocab[i]!r}",
                           hint="vocab[new_id] = vocab[a] + vocab[b]")
    expect_equal(vocab, expected_vocab, "vocab")


@check
def train_bpe(fn):
    for label, text, vocab_size, special_tokens in TRAIN_CASES:
        with case(label):
            call_label = f"train_bpe(text, {vocab_size}{', ' + repr(list(special_tokens)) if special_tokens else ''})"
            try:
                got = call(fn, text, vocab_size, list(special_tokens), what=call_label) if special_tokens else \
                    call(fn, text, vocab_size, what=call_label)
            except LearnerError as e:
                hint = _error_hint(e, text)
                if hint is None:
                    raise
                raise Mismatch(f"{call_label} raised an exception", error_details(e), hint) from None
            _expect_train_result(got, text, vocab_size, special_tokens, call_label)
    with case("vocab_size=257 with 2 special tokens (too small)"):
        try:
            got = fn("abc", 257, ["<a>", "<b>"])
        except NotImplementedError:
            raise NotDone() from None
        except ValueError:
            pass
        except Exception as error:  # noqa: BLE001 - learner code: any other exception is the mistake being named
            raise Mismatch(f"a vocab_size that is too small raised {type(error).__name__}, expected a ValueError",
                           [f"{type(error).__name__}: {error}"],
                           hint="check first: if vocab_size < 256 + len(special_tokens): raise ValueError(...)",
                           ) from None
        else:
            raise Mismatch("train_bpe accepted vocab_size=257 with 2 special tokens, which need 258 ids",
                           [f"it returned {type(got).__name__}"],
                           hint="check first: if vocab_size < 256 + len(special_tokens): raise ValueError(...)")
    return "3 texts and a too small vocab_size"


# --- BPETokenizer --------------------------------------------------------------------------------

TOKENIZER_TEXT = (TRAIN_TEXT + "aaaa abab ababab. Don't we'll 1234 12345. ") * 2 + PATTERN_TEXT * 3
DOUBLE = EOT + EOT
ENCODE_CASES = [
    "the cat sat on the mat.",
    "Then  the   end,\n\n  that's it!",
    "a new word: catamaran 2024",
    "thehe hehe theheh",
    "the end.\n zebra",
    "é and 😀",
    "naïve café, Ça va? 日本語 Ελληνικά ٣٤٥ x²",
    "O'SULLIVAN and O'DONNELL said IT'S",
    "the rat's mat",
    "tthat thatt, look at 33333",
    f"the end{EOT}the start{DOUBLE}{EOT}x",
    "",
]
IDS_FROM_VOCAB = ("take every id from vocab: build a bytes -> id table from vocab and start each pre-token from the "
                  "ids of its single bytes, [self.ids[bytes([b])] for b in word.encode('utf-8')]")

MERGED_FROM_VOCAB = "read each merged token's id from vocab, the id of the bytes a + b (self.ids[a + b])"


def _tokenizer_parts():
    vocab, merges = ref.train_bpe(TOKENIZER_TEXT, 480)
    return vocab, merges


# The layouts of real vocabularies: the same merges, other ids.
def _gpt2_byte_order():
    """GPT-2's order of the 256 single bytes: id k holds the byte whose character comes k-th in its table."""
    table = ref.bytes_to_unicode()
    return sorted(range(256), key=lambda b: ord(table[b]) if ord(table[b]) < 256 else 1000 + ord(table[b]))


def _gpt2_layout(vocab):
    """The single bytes in GPT-2's order ("!" is id 0, "s" id 82), the merged tokens after them as before."""
    order = _gpt2_byte_order()
    return {**{k: bytes([b]) for k, b in enumerate(order)}, **{i: t for i, t in vocab.items() if i >= 256}}


def _special_first_layout(vocab, special):
    """Stanford CS336's layout: the special token at id 0, every other id one higher."""
    return {0: special.encode(), **{i + 1: t for i, t in vocab.items()}}


def _reversed_merges_layout(vocab):
    """The merged tokens numbered backwards: a merge's rank is its place in `merges`, not its token's id."""
    last = max(vocab)
    return {(last - i + 256 if i >= 256 else i): t for i, t in vocab.items()}


LAYOUTS = [
    ("GPT-2's layout (the single bytes in another order: '!' is id 0, 's' id 82)", lambda v: _gpt2_layout(v)),
    ("a special token at id 0 and every other id one higher (Stanford CS336's layout)",
     lambda v: _special_first_layout(v, EOT)),
    ("the merged tokens numbered backwards (a merge's rank is its place in merges)", _reversed_merges_layout),
]


# The mistakes, simulated with the reference's tables, to name the one a wrong answer matches.
def _bpe(tok, ids, ranks=None, merged=None):
    ranks = tok.ranks if ranks is None else ranks
    merged = tok.merged if merged is None else merged
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, math.inf))
        if pair not in ranks:
            break
        ids = ref.merge_pair(ids, pair, merged[pair])
    return ids


def _encode_by(tok, text, word_ids=None, pattern=None):
    """``text`` encoded as ``tok`` would, with ``word_ids(word)`` for each pre-token and ``pattern`` to find them."""
    pattern = tok.pattern if pattern is None else pattern
    out = []
    for piece, special in ref.split_on_special(text, tok.special_tokens):
        if special:
            out.append(tok.special_ids[piece])
            continue
        for word in pattern.findall(piece):
            out += word_ids(word) if word_ids else tok.encode_pretoken(word)
    return out


def _by_frequency(tok, text):
    """At encode time, merge the most frequent pair of the pre-token that has a merge."""
    def word_ids(word):
        ids = [tok.byte_ids[b] for b in word.encode()]
        while True:
            counts = ref.count_pairs(ids)
            candidates = [p for p in counts if p in tok.ranks]
            if not candidates:
                return ids
            pair = max(candidates, key=lambda p: counts[p])
            ids = ref.merge_pair(ids, pair, tok.merged[pair])
    return _encode_by(tok, text, word_ids)


def _leftmost(tok, text):
    """Merge the leftmost pair that has a merge, whatever its rank."""
    def word_ids(word):
        ids = [tok.byte_ids[b] for b in word.encode()]
        while True:
            i = next((k for k in range(len(ids) - 1) if (ids[k], ids[k + 1]) in tok.ranks), None)
            if i is None:
                return ids
            ids[i:i + 2] = [tok.merged[(ids[i], ids[i + 1])]]
    return _encode_by(tok, text, word_ids)


def _longest_match(tok, text):
    """Greedy longest match: at each place the longest vocabulary entry that fits."""
    def word_ids(word):
        data, out, i = word.encode(), [], 0
        while i < len(data):
            j = next(j for j in range(len(data), i, -1) if data[i:j] in tok.byte_to_id)
            out.append(tok.byte_to_id[data[i:j]])
            i = j
        return out
    return _encode_by(tok, text, word_ids)


def _without_pretokens(tok, text):
    """The merges applied to the whole text (per special-token piece), not per pre-token."""
    out = []
    for piece, special in ref.split_on_special(text, tok.special_tokens):
        out += [tok.special_ids[piece]] if special else _bpe(tok, [tok.byte_ids[b] for b in piece.encode()])
    return out


def _byte_values(tok, text):
    """Ids = byte values for the single bytes (right only for the course's own layout)."""
    return _encode_by(tok, text, lambda word: _bpe(tok, list(word.encode())))


def _code_points(tok, text):
    """A pre-token's characters' code points (ord) instead of its UTF-8 bytes."""
    return _encode_by(tok, text, lambda word: _bpe(tok, [tok.byte_ids[ord(c)] for c in word]))


def _merged_id_as_rank(tok, text):
    """A pair's rank taken to be the id of the token it merges into (tiktoken's convention)."""
    ranks = {pair: tok.merged[pair] for pair in tok.ranks}
    return _encode_by(tok, text, lambda word: _bpe(tok, [tok.byte_ids[b] for b in word.encode()], ranks))


def _merged_id_from_rank(tok, text):
    """A merged token's id taken to be 256 + its rank instead of read from vocab (right only where the merges come
    right after the 256 single bytes, in the order learned)."""
    merged = {pair: 256 + rank for pair, rank in tok.ranks.items()}
    return _encode_by(tok, text, lambda word: _bpe(tok, [tok.byte_ids[b] for b in word.encode()], merged=merged))


def _merged_ids_renumbered(tok, text):
    """The right tokens, but each merged token numbered 256 + its rank."""
    rank_of = {tok.merged[pair]: rank for pair, rank in tok.ranks.items()}
    return [256 + rank_of[i] if i in rank_of else i for i in tok.encode(text)]


def _specials_dropped(tok, text):
    """regex.split on the special tokens without a capturing group: the text between them, the tokens gone."""
    return [i for piece, special in ref.split_on_special(text, tok.special_tokens) if not special
            for i in _encode_by(tok, piece)]


def _encode_mistakes(tok, text):
    plain = ref.BPETokenizer(tok.vocab, tok.merges)  # no special tokens: they are split like text
    shortest = ref.BPETokenizer(tok.vocab, tok.merges, [EOT])
    first_merged = tok.byte_to_id[b"".join(tok.merges[0])] if tok.merges else None
    mistakes = [
        ("your encoder starts from the byte values as ids (id = byte value), which holds only for the course's own "
         "layout: " + IDS_FROM_VOCAB, lambda: _byte_values(tok, text)),
        ("your encoder matches the longest vocabulary entry at each place; BPE applies the merges in the order they "
         "were learned: at each step merge the pair with the lowest rank (earliest merge)",
         lambda: _longest_match(tok, text)),
        ("your encoder merges the leftmost pair that has a merge; BPE merges the pair with the lowest rank (the "
         "earliest learned) wherever it is: min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, inf))",
         lambda: _leftmost(tok, text)),
        ("the merges were applied by how often each pair occurs in the text being encoded; apply them in the "
         "order they were learned: at each step merge the pair with the lowest rank (earliest merge)",
         lambda: _by_frequency(tok, text)),
        ("a pair's rank was taken to be the id of the token it merges into; the rank is the merge's place in "
         "`merges` (enumerate(merges)), whatever ids the vocabulary gives", lambda: _merged_id_as_rank(tok, text)),
        ("the characters' code points (ord(c)) were used instead of the UTF-8 bytes: a pre-token's ids come from "
         "word.encode('utf-8'), and 'é' is two bytes", lambda: _code_points(tok, text)),
        ("the text was not pre-tokenized: split it with GPT-2's pattern first and apply the merges inside "
         "each pre-token", lambda: _without_pretokens(tok, text)),
        ("a special token was split into ordinary tokens: split the text on the special tokens first and give "
         "each its own id", lambda: plain.encode(text)),
        ("the special tokens are missing from the ids: regex.split drops the text its pattern matched unless the "
         "pattern is a capturing group; put it in parentheses, '(' + '|'.join(...) + ')', so that each special "
         "token comes back as a piece and gets its id", lambda: _specials_dropped(tok, text)),
        (f"a merged token's id was taken to be 256 + its rank, but this vocabulary gives the token of merge 0 the "
         f"id {first_merged}: " + MERGED_FROM_VOCAB, lambda: _merged_id_from_rank(tok, text)),
        (f"the merged tokens got the ids 256 + rank, but this vocabulary gives the token of merge 0 the id "
         f"{first_merged}: " + MERGED_FROM_VOCAB, lambda: _merged_ids_renumbered(tok, text)),
        ("of two overlapping special tokens the shorter was taken: try the longest first "
         "(sort the special tokens by length, longest first, in the pattern)", lambda: shortest.encode(text)),
    ]
    mistakes += [(cause, lambda pattern=pattern: _encode_by(tok, text, pattern=pattern))
                 for cause, pattern in COMPILED_PATTERNS]
    return mistakes


def _name_encode_mistake(reference, text, got):
    for cause, make in _encode_mistakes(reference, text):
        try:
            if make() == got:
                return cause
        except (KeyError, IndexError, ValueError, StopIteration):  # the mistake cannot even encode this text
            continue
    return None


def _build(cls, vocab, merges, special_tokens, label):
    return call(cls, dict(vocab), list(merges), special_tokens, what=label)


def _method(obj, name, label):
    method = getattr(obj, name, None)
    if method is None:
        raise Mismatch(f"your tokenizer has no method `{name}`", hint=f"define def {name}(self, ...) in the class")
    return method


def _error_hint(error: LearnerError, text: str) -> str | None:
    """The likely cause of an exception in the learner's encode."""
    e = error.error
    if isinstance(e, ValueError) and "bytes must be in range" in str(e) or (
            isinstance(e, KeyError) and e.args and isinstance(e.args[0], int) and e.args[0] > 255):
        return ("a character's code point (ord(c)) was used as a byte: a pre-token's bytes are "
                "word.encode('utf-8'), and '日' is three of them")
    if isinstance(e, KeyError) and e.args and isinstance(e.args[0], int) and e.args[0] < 256:
        return "your encoder looks up a byte value as if it were an id: " + IDS_FROM_VOCAB
    if "bad escape \\p" in str(e):
        return "the standard `re` module has no \\p{L}: use the `regex` package (import regex)"
    return None


def _expect_encode(tok, reference, text, what, hint_on_error=None):
    try:
        got = call(tok.encode, text, what=f"encode({text!r})")
    except LearnerError as e:
        hint = _error_hint(e, text) or hint_on_error or e.hint
        raise Mismatch(f"encode({text!r}) raised an exception{what}", error_details(e), hint) from None
    got = _ids_list(got, f"encode({text!r})")
    expected = reference.encode(text)
    if got == expected:
        return
    cause = _name_encode_mistake(reference, text, got)
    if cause is None and len(got) == len(expected) and sorted(set(got) - set(expected)) and all(
            reference.vocab.get(g) == reference.vocab.get(e) for g, e in zip(got, expected)):
        cause = "two ids hold the same bytes and you used the higher one: use the lower id"
    specials = set(reference.special_ids.values())
    if cause is None and len(got) == len(expected) and all(
            e in specials for g, e in zip(got, expected) if g != e):
        cause = ("the special tokens have the wrong ids: one already in vocab keeps its id, one missing from vocab "
                 "gets the next free id, in the order given")
    raise Mismatch(f"encode({text!r}) is wrong{what}", [f"expected {expected}", f"got      {got}"], cause)


# Chunks cut anywhere: inside a word, inside a contraction ("We'l" + "l") and inside a special token.
CHUNKS = ["the c", "at sat", ".\n\n", "  We'l", "l see", " it<|endof", "text|>and", " then" + EOT, EOT + " the end"]


def _streamed(reference, chunks, margin=3, hold_specials=True, keep_last=False):
    """What an encode_iterable gives that, after each chunk, encodes the pieces of its buffer that end ``margin``
    characters or more before its end (with ``hold_specials``, before where a special token may be starting; with
    ``keep_last``, never the last piece) and keeps the rest for the next chunk."""
    out, buffer = [], ""
    for chunk in chunks:
        buffer += chunk
        limit = (reference.stable_end(buffer) + 3 if hold_specials else len(buffer)) - margin
        pieces, done = list(reference.pieces(buffer)), 0
        for k, (piece, special) in enumerate(pieces):
            if done + len(piece) > limit or keep_last and k == len(pieces) - 1:
                break
            out += reference.piece_ids(piece, special)
            done += len(piece)
        buffer = buffer[done:]
    return out + reference.encode(buffer)


def _chunk_mistake(reference, chunks, got):
    """The likely cause of wrong ids from encode_iterable(chunks), or None."""
    if got == _streamed(reference, chunks, hold_specials=False):
        return ("a special token cut between two chunks ('<|endof' + 'text|>') was encoded as ordinary text: hold "
                "back the end of the buffer from where a special token may be starting, until the next chunk shows "
                "whether it is one")
    if got == _streamed(reference, chunks, margin=0, keep_last=True):
        return ("a pre-token near the end of the buffer was encoded before the next chunk could change it (\"We'l\" + "
                "\"l\" is 'We' + \"'ll\", not \"'\" + 'll'): hold back every piece that ends within 3 characters of "
                "the end of the buffer, not only the last piece")
    return None


@check
def BPETokenizer(cls):
    vocab, merges = _tokenizer_parts()
    specials = [EOT, DOUBLE]
    label = "BPETokenizer(vocab, merges, ['<|endoftext|>', '<|endoftext|><|endoftext|>'])"
    with case("building the tokenizer", hint_on_error="a special token missing from vocab gets the next free id; "
                                                      "where two ids hold the same bytes, use the lower"):
        tok = _build(cls, vocab, merges, specials, label)
    reference = ref.BPETokenizer(vocab, merges, specials)
    _method(tok, "encode", label)
    decode = _method(tok, "decode", label)
    for text in ENCODE_CASES:
        hint = "a special token missing from vocab gets the next free id" if EOT in text else None
        with case(f"encode({text!r})"):
            _expect_encode(tok, reference, text, "", hint)
    with case("decode"):
        for text in ENCODE_CASES:
            ids = reference.encode(text)
            try:
                got = call(decode, list(ids), what=f"decode({ids})")
            except LearnerError as e:
                raise Mismatch(f"decode raised an exception on the ids of {text!r}", error_details(e),
                               hint=("decode the joined bytes with .decode('utf-8', errors='replace'), "
                                     "joining first: a character may be split over two tokens")
                               if isinstance(e.error, UnicodeDecodeError) else e.hint) from None
            if got != text:
                by_token = "".join(reference.vocab[i].decode("utf-8", errors="replace") for i in ids)
                hint = ("each token was decoded on its own, which breaks a character split over two tokens: "
                        "join all the bytes first, b''.join(...), then decode once") if got == by_token else None
                expect_equal(got, text, f"decode(encode({text!r}))", hint=hint)
    with case("decode of half a character, [0xC3] (the first byte of 'é')"):
        try:
            got = call(decode, [0xC3], what="decode([0xC3])")
        except LearnerError as e:
            raise Mismatch("decode raised an exception on bytes that are not valid UTF-8", error_details(e),
                           hint="use .decode('utf-8', errors='replace'): invalid bytes become '\\ufffd' (�)") from None
        if got == "":
            raise Mismatch("decode dropped bytes that are not valid UTF-8",
                           [f"expected {chr(0xFFFD)!r}, got ''"],
                           hint="errors='ignore' hides them; use errors='replace' so they show as '\\ufffd' (�)")
        expect_equal(got, "\ufffd", "decode([0xC3])", hint="use .decode('utf-8', errors='replace')")
    for layout, make in LAYOUTS:
        with case(f"the vocabulary of {layout}"):
            other = make(vocab)
            shown = f"BPETokenizer(vocab in {layout.split(' (')[0]}, merges, ['<|endoftext|>'])"
            tok2 = _build(cls, other, merges, [EOT], shown)
            reference2 = ref.BPETokenizer(other, merges, [EOT])
            for text in [t for t in ENCODE_CASES[:-1] if DOUBLE not in t] + [f"the end{EOT} the start"]:
                _expect_encode(tok2, reference2, text, "")
            ids = reference2.encode(ENCODE_CASES[6])
            back = call(tok2.decode, ids, what=f"decode({ids})")
            expect_equal(back, ENCODE_CASES[6], f"decode(encode({ENCODE_CASES[6]!r})) with {layout}",
                         hint="decode looks every id up in vocab: vocab[i] for each id, joined, then decoded")
    with case("a vocab with the same bytes twice ('the' at a second, higher id)"):
        doubled = dict(vocab)
        doubled[len(doubled)] = b" the"
        tok2 = _build(cls, doubled, merges, None, "BPETokenizer(vocab, merges)")
        got = _ids_list(call(tok2.encode, "the cat, the hat", what="encode('the cat, the hat')"), "encode")
        expected = reference.encode("the cat, the hat")
        if got != expected:
            cause = ("two ids hold the same bytes and you used the higher one: build the bytes-to-id table so that "
                     "the lower id wins") if len(doubled) - 1 in got else None
            raise Mismatch("encode('the cat, the hat') is wrong", [f"expected {expected}", f"got      {got}"],
                           cause)
    with case("encode_iterable on lines"):
        lines = ["First line.\n", "  indented line\n", "\n", "  the end", EOT, " of it\n"]
        whole = "".join(lines)
        iterate = _method(tok, "encode_iterable", label)
        got = call(lambda: list(iterate(at(iter)(lines))), what="list(encode_iterable(lines))")
        expected = reference.encode(whole)
        if got != expected:
            cause = None
            if got == [i for line in lines for i in reference.encode(line)]:
                cause = ("each line was encoded on its own; GPT-2's pattern joins a line's '\\n' to the spaces that "
                         "start the next line, so keep the end of a line and encode it together with what follows")
            elif got in ([i for line in lines for i in reference.encode(line.rstrip("\n"))],
                         reference.encode("".join(line.rstrip("\n") for line in lines)),
                         reference.encode("".join(line.strip() for line in lines))):
                cause = "the line ends were dropped: lines from a file keep their '\\n'; don't strip them"
            raise Mismatch("encode_iterable(lines) gives other ids than encode(''.join(lines))",
                           [f"expected {expected}", f"got      {got}"], cause)
    with case(f"encode_iterable on chunks cut anywhere, {CHUNKS}"):
        got = call(lambda: list(iterate(at(iter)(CHUNKS))), what="list(encode_iterable(chunks))")
        expected = reference.encode("".join(CHUNKS))
        if got != expected:
            raise Mismatch("encode_iterable(chunks) gives other ids than encode(''.join(chunks))",
                           [f"expected {expected}", f"got      {got}"], _chunk_mistake(reference, CHUNKS, got))
    with case("encode_iterable on a file of 2,000 lines, one id taken"):
        source = at(beside.Lines)([f"line {k} of the file, the cat sat on the mat.\n" for k in range(2000)])
        stream = call(iterate, at(iter)(source), what="encode_iterable(lines)")
        first = call(lambda: next(iter(stream), None), what="next(encode_iterable(lines))")
        if first is None:
            raise Mismatch("encode_iterable(lines) yielded nothing", hint="yield the ids as you go")
        if source.taken > 10:
            raise Mismatch(f"encode_iterable read {source.taken:,} of 2,000 lines before it gave the first id",
                           hint="it read the whole input first (\"\".join(lines) or list(lines)); a file may not fit "
                                "in memory: add one line at a time to a buffer and yield the ids of the part of it "
                                "that is settled")
    with case("two special tokens missing from the vocab, given as ['<|pad|>', '<|endofprompt|>']"):
        order = ["<|pad|>", "<|endofprompt|>"]
        tok3 = _build(cls, vocab, merges, order, "BPETokenizer(vocab, merges, ['<|pad|>', '<|endofprompt|>'])")
        text = "a<|endofprompt|><|pad|>"
        got = _ids_list(call(tok3.encode, text, what=f"encode({text!r})"), "encode")
        expected = [reference.byte_to_id[b"a"], len(vocab) + 1, len(vocab)]
        if got != expected:
            hint = f"a special token that is not in vocab gets the next free id, here {len(vocab)} and {len(vocab) + 1}"
            if got == [expected[0], len(vocab), len(vocab) + 1]:
                hint = ("the special tokens were numbered in sorted order (by name or by length); number them in "
                        "the order given: '<|pad|>' first")
            expect_equal(got, expected, f"encode({text!r})", hint=hint)
        back = call(tok3.decode, expected, what=f"decode({expected})")
        expect_equal(back, text, f"decode({expected})", hint="add the new special tokens to the vocab too")
    return f"{len(ENCODE_CASES)} texts in {len(LAYOUTS) + 1} vocabulary layouts, decode, encode_iterable, specials"


# --- bits_per_byte -------------------------------------------------------------------------------


@check
def bits_per_byte(fn):
    ln2 = math.log(2)
    cases = [(1.8, 100, 100), (2.0, 50, 200), (torch.tensor(3.2), 300, 1000), (0.693, 7, 3), (math.log(2), 10, 10)]
    for loss, n_tokens, n_bytes in cases:
        kind = " (a 0-d tensor)" if isinstance(loss, torch.Tensor) else ""
        shown = f"bits_per_byte({float(loss):g}{kind}, {n_tokens}, {n_bytes})"
        with case(shown):
            try:
                got = call(fn, loss, n_tokens, n_bytes, what=shown)
            except LearnerError as e:
                hint = e.hint
                if "item" in str(e.error) or "float" in str(e.error):
                    hint = "loss may be a float or a 0-d tensor: float(loss) works for both"
                raise Mismatch(f"{shown} raised an exception", error_details(e), hint) from None
            if isinstance(got, torch.Tensor):
                raise Mismatch(f"{shown} returned a tensor; it should return a Python float",
                               hint="float(loss) * n_tokens / (n_bytes * math.log(2))")
            if isinstance(got, str):
                raise Mismatch(f"{shown} returned a string; it should return a float", hint="don't format the number")
            if not isinstance(got, (float, int)):
                raise Mismatch(f"{shown} returned {type(got).__name__}; it should return a float")
            L = float(loss)
            expected = L * n_tokens / (n_bytes * ln2)
            if math.isclose(got, expected, rel_tol=1e-6):
                continue
            mistakes = [
                ("the ln 2 is missing: a loss in nats becomes bits when divided by ln 2 (math.log(2))",
                 L * n_tokens / n_bytes),
                ("multiplied by ln 2 instead of dividing: bits = nats / ln 2", L * n_tokens / n_bytes * ln2),
                ("this is bits per token: multiply by n_tokens / n_bytes to get bits per byte", L / ln2),
                ("the ratio is upside down: the total loss is loss * n_tokens, shared over n_bytes bytes",
                 L * n_bytes / (n_tokens * ln2)),
                ("n_tokens // n_bytes is an integer division: use /", L * (n_tokens // n_bytes) / ln2),
                ("this uses log base 10: bits need ln 2", L * n_tokens / (n_bytes * math.log(10))),
                ("the result is in bits per token per byte: loss * n_tokens / n_bytes, not loss / n_bytes",
                 L / (n_bytes * ln2)),
            ]
            cause = next((d for d, v in mistakes if not math.isclose(v, expected, rel_tol=1e-9)
                          and math.isclose(got, v, rel_tol=1e-6)), None)
            raise Mismatch(f"{shown} is wrong", [f"expected {expected:.6g}, got {got:.6g}"], cause)
    return f"{len(cases)} cases"
