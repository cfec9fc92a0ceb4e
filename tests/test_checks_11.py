"""Checks of notebook 11: accept the reference, report the stub, reject realistic mistakes."""

import math
from collections import Counter

import pytest
import regex
import torch
from checkkit import not_done, passes, rejects, stub

from conftest import SHARED
from tutor import checks
from tutor import reference as ref
from tutor.course import catalog

NAMES = [e.name for e in catalog.exercises(11)]  # an exercise added to the catalog is tested here too
PATTERN = regex.compile(ref.GPT2_PATTERN)


@pytest.mark.parametrize("name", NAMES)
def test_accepts_reference(name):
    passes(getattr(checks, name), getattr(ref, name))


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_done(name):
    not_done(getattr(checks, name), stub)


@pytest.mark.parametrize("name", NAMES)
def test_not_a_function(name):
    result = getattr(checks, name)("count_pairs")
    assert result.status == "failed" and "pass your" in result.summary


@pytest.mark.parametrize("name", NAMES)
def test_checks_are_fast(name):
    assert getattr(checks, name)(getattr(ref, name)).seconds < 1.0


# --- count_pairs ---------------------------------------------------------------------------------


def cp_once(ids, counts=None):
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] = 1
    return counts


def cp_no_overlap(ids, counts=None):
    counts = {} if counts is None else counts
    i = 0
    while i < len(ids) - 1:
        pair = (ids[i], ids[i + 1])
        counts[pair] = counts.get(pair, 0) + 1
        i += 2 if ids[i] == ids[i + 1] else 1  # as merge_pair skips a merged pair
    return counts


def cp_wraps(ids, counts=None):
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:] + ids[:1]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def cp_misses_last(ids, counts=None):
    counts = {} if counts is None else counts
    for i in range(len(ids) - 2):
        pair = (ids[i], ids[i + 1])
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def cp_mutable_default(ids, counts={}):  # noqa: B006 - the learner's mistake, on purpose
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def cp_new_dict(ids, counts=None):
    result = {}
    for pair in zip(ids, ids[1:]):
        result[pair] = result.get(pair, 0) + 1
    return result


def cp_update_overwrites(ids, counts=None):
    counts = {} if counts is None else counts
    counts.update(Counter(zip(ids, ids[1:])))  # dict.update replaces the counts already there
    return counts


def cp_counts_ids(ids, counts=None):
    return dict(Counter(ids))


def cp_list(ids, counts=None):
    return list(zip(ids, ids[1:]))


def cp_no_return(ids, counts=None):
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1


def test_count_pairs_rejects():
    rejects(checks.count_pairs, cp_once, "counted once", "counts.get(pair, 0) + 1")
    rejects(checks.count_pairs, cp_no_overlap, "overlapping pairs", "(7, 7) twice")
    rejects(checks.count_pairs, cp_wraps, "last id back to the first")
    rejects(checks.count_pairs, cp_misses_last, "last pair is missing")
    rejects(checks.count_pairs, cp_mutable_default, "second call", "counts=None")
    rejects(checks.count_pairs, cp_new_dict, "in place and return it")
    rejects(checks.count_pairs, cp_update_overwrites, "added to the counts already there", "overwrites")
    rejects(checks.count_pairs, cp_counts_ids, "pairs (a, b)")
    rejects(checks.count_pairs, cp_list, "should return a dict")
    rejects(checks.count_pairs, cp_no_return, "returned None", "return the dictionary")


# --- merge_pair ----------------------------------------------------------------------------------


def mp_overlapping(ids, pair, new_id):
    found = [i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == pair]  # overlapping matches
    merged = list(ids)
    for i in reversed(found):
        merged[i:i + 2] = [new_id]
    return merged


def mp_every_occurrence(ids, pair, new_id):
    """Every place the pair starts becomes new_id: [7, 7, 7] -> [300, 300] ("aaa" -> two "aa")."""
    merged = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            merged.append(new_id)
        elif i == 0 or (ids[i - 1], ids[i]) != pair:
            merged.append(ids[i])
    return merged


def mp_in_place(ids, pair, new_id):
    i = 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            ids[i:i + 2] = [new_id]
        i += 1
    return ids


def mp_in_place_no_return(ids, pair, new_id):
    mp_in_place(ids, pair, new_id)


def mp_first_only(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new_id] + ids[i + 2:]
    return list(ids)


def mp_drops_last(ids, pair, new_id):
    merged, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            merged.append(new_id)
            i += 2
        else:
            merged.append(ids[i])
            i += 1
    return merged


def mp_from_the_right(ids, pair, new_id):
    merged, i = [], len(ids) - 1
    while i >= 0:
        if i > 0 and (ids[i - 1], ids[i]) == pair:
            merged.insert(0, new_id)
            i -= 2
        else:
            merged.insert(0, ids[i])
            i -= 1
    return merged


def mp_either_order(ids, pair, new_id):
    merged, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and {ids[i], ids[i + 1]} == set(pair) and ids[i] != ids[i + 1] or (
                i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair):
            merged.append(new_id)
            i += 2
        else:
            merged.append(ids[i])
            i += 1
    return merged


def mp_keeps_pair(ids, pair, new_id):
    merged = []
    for i in range(len(ids)):
        merged.append(ids[i])
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            merged.append(new_id)
    return merged


def mp_no_skip(ids, pair, new_id):
    merged, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            merged.append(new_id)
            i += 1  # forgets to skip the second id of the pair
            merged.append(ids[i])
            i += 1
        else:
            merged.append(ids[i])
            i += 1
    return merged


def mp_tuple(ids, pair, new_id):
    return tuple(ref.merge_pair(ids, pair, new_id))


def mp_string_replace(ids, pair, new_id):
    text = " ".join(str(i) for i in ids).replace(f"{pair[0]} {pair[1]}", str(new_id))
    return [int(x) for x in text.split()]


def mp_list_string_replace(ids, pair, new_id):
    text = str(ids)[1:-1].replace(f"{pair[0]}, {pair[1]}", str(new_id))
    return [int(x) for x in text.split(", ")] if text else []


def test_merge_pair_rejects():
    rejects(checks.merge_pair, mp_overlapping, "overlapping occurrences", "[new_id, 7]")
    rejects(checks.merge_pair, mp_every_occurrence, "overlapping occurrences", "share the middle 7", "i += 2")
    rejects(checks.merge_pair, mp_in_place, "changed the list it was given")
    rejects(checks.merge_pair, mp_in_place_no_return, "in place and returned None")
    rejects(checks.merge_pair, mp_first_only, "only the first occurrence")
    rejects(checks.merge_pair, mp_drops_last, "last id is missing")
    rejects(checks.merge_pair, mp_from_the_right, "from the right", "left to right")
    rejects(checks.merge_pair, mp_either_order, "(b, a)", "ordered")
    rejects(checks.merge_pair, mp_keeps_pair, "longer than the input")
    rejects(checks.merge_pair, mp_no_skip, "skip both ids")
    rejects(checks.merge_pair, mp_tuple, "should return a list")
    rejects(checks.merge_pair, mp_string_replace, "string of the ids", "'11 22' contains '1 2'")
    rejects(checks.merge_pair, mp_list_string_replace, "string of the ids", "compare ids")


# --- train_bpe -----------------------------------------------------------------------------------


def learner_train(text, vocab_size, special_tokens=(), *,
                  tie=lambda counts, vocab, p: (counts[p], vocab[p[0]], vocab[p[1]]),
                  pretokenize=lambda piece: PATTERN.findall(piece), split_special=True, weighted=True,
                  n_merges=None, specials_first=False, check_size=True, byte_merges=True, join_specials=False,
                  code_points=False, min_count=1, special_order=list):
    """A learner's trainer (the naive one), with one knob per mistake."""
    if check_size and vocab_size < 256 + len(special_tokens):
        raise ValueError("vocab_size too small")
    if split_special and special_tokens:
        pattern = "(" + "|".join(regex.escape(s) for s in sorted(special_tokens, key=len, reverse=True)) + ")"
        pieces = [p for p in regex.split(pattern, text) if p not in special_tokens]
        if join_specials:
            pieces = ["".join(pieces)]
    else:
        pieces = [text]
    words = Counter()
    for piece in pieces:
        words.update(pretokenize(piece))
    if not weighted:
        words = Counter(set(words))
    def start(w):
        if code_points == "latin-1":
            return tuple(w.encode("latin-1", errors="ignore"))
        return tuple(ord(c) for c in w) if code_points else tuple(w.encode())

    seqs = {start(w): n for w, n in words.items()}
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    total = n_merges if n_merges is not None else vocab_size - 256 - len(special_tokens)
    for new_id in range(256, 256 + total):
        counts = {}
        for seq, n in seqs.items():
            for pair in zip(seq, seq[1:]):
                counts[pair] = counts.get(pair, 0) + n
        if not counts:
            break
        best = max(counts, key=lambda p: tie(counts, vocab, p))
        if counts[best] < min_count:
            break
        seqs = {tuple(ref.merge_pair(list(s), best, new_id)): n for s, n in seqs.items()}
        merges.append((vocab[best[0]], vocab[best[1]]) if byte_merges else best)
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
    if specials_first:
        shifted = {i: s.encode() for i, s in enumerate(special_tokens)}
        shifted.update({i + len(special_tokens): b for i, b in vocab.items()})
        return shifted, merges
    for s in special_order(special_tokens):
        vocab[len(vocab)] = s.encode()
    return vocab, merges


def tb_correct(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens)


def tb_tie_smaller(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens,
                         tie=lambda c, v, p: (c[p], [-x for x in v[p[0]] + b"\xff"], [-x for x in v[p[1]] + b"\xff"]))


def tb_tie_by_ids(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, tie=lambda c, v, p: (c[p], p))


def tb_first_seen(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, tie=lambda c, v, p: c[p])


def tb_tie_joined(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, tie=lambda c, v, p: (c[p], v[p[0]] + v[p[1]]))


def tb_tie_last_seen(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, tie=lambda c, v, p: (c[p], list(c).index(p)))


def tb_non_space_runs(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, pretokenize=regex.compile(r"\S+").findall)


def tb_no_pretokenization(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, pretokenize=lambda piece: [piece])


def tb_split_on_spaces(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, pretokenize=str.split)


def tb_specials_not_split(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, split_special=False)


def tb_specials_deleted(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, join_specials=True)


def tb_specials_first(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, specials_first=True)


def tb_forgets_specials_in_size(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, n_merges=vocab_size - 256)


def tb_one_merge_short(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, n_merges=vocab_size - 257 - len(special_tokens))


def tb_unweighted(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, weighted=False)


def tb_no_size_check(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, check_size=False)


def tb_id_merges(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, byte_merges=False)


def tb_ascii_letters(text, vocab_size, special_tokens=()):
    ascii_only = regex.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[a-zA-Z]+| ?[0-9]+| ?[^\sa-zA-Z0-9]+|\s+(?!\S)|\s+""")
    return learner_train(text, vocab_size, special_tokens, pretokenize=ascii_only.findall)


def tb_word_characters(text, vocab_size, special_tokens=()):
    words = regex.compile(r"""'(?:[sdmt]|ll|ve|re)| ?\w+| ?[^\s\w]+|\s+(?!\S)|\s+""")
    return learner_train(text, vocab_size, special_tokens, pretokenize=words.findall)


def tb_case_insensitive(text, vocab_size, special_tokens=()):
    gpt4ish = regex.compile(r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
    return learner_train(text, vocab_size, special_tokens, pretokenize=gpt4ish.findall)


def tb_code_points(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, code_points=True)


def tb_latin1(text, vocab_size, special_tokens=()):
    """Code points where they fit in a byte: word.encode("latin-1", errors="ignore")."""
    return learner_train(text, vocab_size, special_tokens, code_points="latin-1")


def tb_stops_at_one(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, min_count=2)


def tb_sorted_specials(text, vocab_size, special_tokens=()):
    return learner_train(text, vocab_size, special_tokens, special_order=sorted)


def test_train_bpe_rejects():
    passes(checks.train_bpe, tb_correct)  # the learner-style trainer itself is right
    rejects(checks.train_bpe, tb_tie_smaller, "tie was broken the wrong way", "greater")
    rejects(checks.train_bpe, tb_tie_by_ids, "comparing ids", "bytes")
    rejects(checks.train_bpe, tb_first_seen, "which pair came first")
    rejects(checks.train_bpe, tb_tie_joined, "joined", "(vocab[a], vocab[b])", "first tokens first")
    rejects(checks.train_bpe, tb_tie_last_seen, "another way than the rule's", "both occur")
    rejects(checks.train_bpe, tb_non_space_runs, "spaces were dropped", "\\S+")
    rejects(checks.train_bpe, tb_no_pretokenization, "across pre-tokens")
    rejects(checks.train_bpe, tb_split_on_spaces, "spaces were dropped")
    rejects(checks.train_bpe, tb_specials_not_split, "special token was counted")
    rejects(checks.train_bpe, tb_specials_deleted, "across a special token")
    rejects(checks.train_bpe, tb_specials_first, "special tokens were given the first ids")
    rejects(checks.train_bpe, tb_forgets_specials_in_size, "off by one", "special tokens")
    rejects(checks.train_bpe, tb_one_merge_short, "off by one")
    rejects(checks.train_bpe, tb_unweighted, "how often the pre-token occurs")
    rejects(checks.train_bpe, tb_no_size_check, "accepted vocab_size=257", "ValueError")
    rejects(checks.train_bpe, tb_id_merges, "(bytes, bytes)", "not their ids")
    rejects(checks.train_bpe, tb_ascii_letters, "only ASCII letters", "\\p{L}")
    rejects(checks.train_bpe, tb_word_characters, "\\w", "digits and '_'")
    rejects(checks.train_bpe, tb_case_insensitive, "case-insensitively")
    rejects(checks.train_bpe, tb_code_points, "code point", "utf-8")
    rejects(checks.train_bpe, tb_latin1, "code point", "utf-8")
    rejects(checks.train_bpe, tb_stops_at_one, "occurs only once", "vocab_size")
    rejects(checks.train_bpe, tb_sorted_specials, "sorted order", "order given")


# --- BPETokenizer --------------------------------------------------------------------------------


class LearnerTokenizer:
    """A learner's tokenizer, written plainly; the subclasses below each make one mistake."""

    pattern = PATTERN

    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = dict(vocab)
        self.special_tokens = list(special_tokens or [])
        self.ids = self.bytes_to_ids()
        self.add_specials()
        self.ranks = {(self.ids[a], self.ids[b]): r for r, (a, b) in enumerate(merges)}
        self.merged = {(self.ids[a], self.ids[b]): self.ids[a + b] for a, b in merges}

    def bytes_to_ids(self):
        ids = {}
        for i, b in sorted(self.vocab.items()):
            ids.setdefault(b, i)
        return ids

    def add_specials(self):
        for s in self.special_tokens:
            if s.encode() not in self.ids:
                self.vocab[max(self.vocab) + 1] = s.encode()
                self.ids[s.encode()] = max(self.vocab)

    def special_order(self):
        return sorted(self.special_tokens, key=len, reverse=True)

    def split(self, text):
        if not self.special_tokens:
            return [text]
        pattern = "(" + "|".join(regex.escape(s) for s in self.special_order()) + ")"
        return [p for p in regex.split(pattern, text) if p]

    def pretokens(self, piece):
        return self.pattern.findall(piece)

    def start(self, word):
        return [self.ids[bytes([b])] for b in word.encode("utf-8")]

    def encode_word(self, word):
        ids = self.start(word)
        while len(ids) > 1:
            pair = min(zip(ids, ids[1:]), key=lambda p: self.ranks.get(p, math.inf))
            if pair not in self.ranks:
                break
            ids = ref.merge_pair(ids, pair, self.merged[pair])
        return ids

    def encode(self, text):
        out = []
        for piece in self.split(text):
            if piece in self.special_tokens:
                out.append(self.ids[piece.encode()])
            else:
                for word in self.pretokens(piece):
                    out += self.encode_word(word)
        return out

    def decode(self, ids):
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")

    def encode_iterable(self, lines):
        # a learner's way to stay lean: encode up to the last blank-free line end seen, keep the rest
        buffer = ""
        for line in lines:
            buffer += line
            cut = buffer.rfind("\n", 0, max(0, len(buffer) - 1))
            while cut > 0 and (buffer[cut - 1].isspace() or buffer[cut + 1:cut + 2].isspace()):
                cut = buffer.rfind("\n", 0, cut)
            if cut > 0 and not any(s[:1] in buffer[cut:] for s in self.special_tokens):
                yield from self.encode(buffer[:cut])
                buffer = buffer[cut:]
        yield from self.encode(buffer)


class ByFrequency(LearnerTokenizer):
    def encode_word(self, word):
        ids = self.start(word)
        while True:
            counts = ref.count_pairs(ids)
            known = [p for p in counts if p in self.ranks]
            if not known:
                return ids
            pair = max(known, key=counts.get)
            ids = ref.merge_pair(ids, pair, self.merged[pair])


class ByteValueIds(LearnerTokenizer):
    """The course's layout assumed: id = byte value (what notebook 11's solution did before)."""

    def start(self, word):
        return list(word.encode("utf-8"))


class LongestMatch(LearnerTokenizer):
    def encode_word(self, word):
        data, out, i = word.encode(), [], 0
        while i < len(data):
            for j in range(len(data), i, -1):
                if data[i:j] in self.ids:
                    out.append(self.ids[data[i:j]])
                    i = j
                    break
        return out


class LeftmostPair(LearnerTokenizer):
    def encode_word(self, word):
        ids = self.start(word)
        merged = True
        while merged:
            merged = False
            for k in range(len(ids) - 1):
                if (ids[k], ids[k + 1]) in self.ranks:
                    ids[k:k + 2] = [self.merged[(ids[k], ids[k + 1])]]
                    merged = True
                    break
        return ids


class MergedIdIsRank(LearnerTokenizer):
    def __init__(self, vocab, merges, special_tokens=None):
        super().__init__(vocab, merges, special_tokens)
        self.ranks = {pair: self.merged[pair] for pair in self.ranks}  # tiktoken's convention


class CodePoints(LearnerTokenizer):
    def start(self, word):
        return [self.ids[bytes([ord(c)])] for c in word]


class AsciiLetters(LearnerTokenizer):
    pattern = regex.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[a-zA-Z]+| ?[0-9]+| ?[^\sa-zA-Z0-9]+|\s+(?!\S)|\s+""")


class CaseInsensitiveContractions(LearnerTokenizer):
    pattern = regex.compile(r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


class NoLookahead(LearnerTokenizer):
    pattern = regex.compile(r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+""")


class NoPretokens(LearnerTokenizer):
    def pretokens(self, piece):
        return [piece]


class SplitsSpecials(LearnerTokenizer):
    def split(self, text):
        return [text]


class ShorterSpecialFirst(LearnerTokenizer):
    def special_order(self):
        return sorted(self.special_tokens, key=len)


class SortedSpecials(LearnerTokenizer):
    def add_specials(self):
        for s in sorted(self.special_tokens):
            if s.encode() not in self.ids:
                self.vocab[max(self.vocab) + 1] = s.encode()
                self.ids[s.encode()] = max(self.vocab)


class SpecialsAlwaysAppended(LearnerTokenizer):
    def add_specials(self):
        for s in self.special_tokens:
            self.vocab[max(self.vocab) + 1] = s.encode()
            self.ids[s.encode()] = max(self.vocab)


class SpecialsAtTheEnd(LearnerTokenizer):
    def add_specials(self):
        n = len(self.special_tokens)
        for k, s in enumerate(self.special_tokens):
            if s.encode() in self.ids:  # assumed to be the last ids of vocab
                self.ids[s.encode()] = max(self.vocab) - n + 1 + k
            else:
                self.vocab[max(self.vocab) + 1] = s.encode()
                self.ids[s.encode()] = max(self.vocab)


class DecodesTokenByToken(LearnerTokenizer):
    def decode(self, ids):
        return "".join(self.vocab[i].decode("utf-8", errors="replace") for i in ids)


class StrictDecode(LearnerTokenizer):
    def decode(self, ids):
        return b"".join(self.vocab[i] for i in ids).decode("utf-8")


class IgnoreDecode(LearnerTokenizer):
    def decode(self, ids):
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="ignore")


class LineByLine(LearnerTokenizer):
    def encode_iterable(self, lines):
        for line in lines:
            yield from self.encode(line)


class DropsLineEnds(LearnerTokenizer):
    def encode_iterable(self, lines):
        for line in lines:
            yield from self.encode(line.rstrip("\n"))


class ReadsEverything(LearnerTokenizer):
    def encode_iterable(self, lines):
        yield from self.encode("".join(lines))


class Streams(LearnerTokenizer):
    """encode_iterable as the notebook's hint 3 says, for chunks cut anywhere; the subclasses each get a part wrong."""

    margin, hold_specials, keep_last = 3, True, False

    def pieces(self, text):
        for part in self.split(text):
            if part in self.special_tokens:
                yield part, True
            else:
                yield from ((word, False) for word in self.pretokens(part))

    def special_start(self, buffer):
        """Where a special token may be starting that the next chunk completes (or makes a longer one)."""
        for p in range(len(buffer)):
            if any(s.startswith(buffer[p:]) and s != buffer[p:] for s in self.special_tokens):
                return p
        return len(buffer)

    def encode_iterable(self, chunks):
        buffer = ""
        for chunk in chunks:
            buffer += chunk
            limit = (self.special_start(buffer) if self.hold_specials else len(buffer)) - self.margin
            pieces, done = list(self.pieces(buffer)), 0
            for k, (piece, special) in enumerate(pieces):
                if done + len(piece) > limit or self.keep_last and k == len(pieces) - 1:
                    break
                yield from [self.ids[piece.encode()]] if special else self.encode_word(piece)
                done += len(piece)
            buffer = buffer[done:]
        yield from self.encode(buffer)


class SpecialCutAcrossChunks(Streams):
    hold_specials = False


class KeepsOnlyTheLastPiece(Streams):
    margin, keep_last = 0, True


class ChunkByChunk(Streams):
    def encode_iterable(self, chunks):
        for chunk in chunks:
            yield from self.encode(chunk)


class MergedIdFromRank(LearnerTokenizer):
    """id = 256 + rank for a merged token: right on the course's layout and GPT-2's, not on CS336's."""

    def __init__(self, vocab, merges, special_tokens=None):
        super().__init__(vocab, merges, special_tokens)
        self.merged = {pair: 256 + rank for pair, rank in self.ranks.items()}


class SpecialsSplitWithoutGroup(LearnerTokenizer):
    def split(self, text):
        if not self.special_tokens:
            return [text]
        pattern = "|".join(regex.escape(s) for s in self.special_order())  # no (...): regex.split drops them
        return [p for p in regex.split(pattern, text) if p]


class NonSpaceRuns(LearnerTokenizer):
    pattern = regex.compile(r"\S+")


class HigherDuplicate(LearnerTokenizer):
    def bytes_to_ids(self):
        return {b: i for i, b in self.vocab.items()}  # a later id overwrites an earlier one


class SpecialsMustBeInVocab(LearnerTokenizer):
    def add_specials(self):
        pass


class NoEncodeIterable(LearnerTokenizer):
    encode_iterable = None


def test_bpe_tokenizer_rejects():
    passes(checks.BPETokenizer, LearnerTokenizer)  # the plain learner tokenizer is right
    rejects(checks.BPETokenizer, ByFrequency, "by how often each pair occurs", "order they were learned")
    rejects(checks.BPETokenizer, ByteValueIds, "byte values as ids", "take every id from vocab")
    rejects(checks.BPETokenizer, LongestMatch, "matches the longest vocabulary entry", "order they were learned")
    rejects(checks.BPETokenizer, LeftmostPair, "leftmost pair", "lowest rank")
    rejects(checks.BPETokenizer, MergedIdIsRank, "rank was taken to be the id", "place in `merges`")
    rejects(checks.BPETokenizer, CodePoints, "code point", "utf-8")
    rejects(checks.BPETokenizer, AsciiLetters, "only ASCII letters", "\\p{L}")
    rejects(checks.BPETokenizer, CaseInsensitiveContractions, "case-insensitively", "O'SULLIVAN")
    rejects(checks.BPETokenizer, NoLookahead, "look-ahead")
    rejects(checks.BPETokenizer, NoPretokens, "not pre-tokenized")
    rejects(checks.BPETokenizer, SplitsSpecials, "special token was split")
    rejects(checks.BPETokenizer, ShorterSpecialFirst, "shorter was taken", "longest first")
    rejects(checks.BPETokenizer, SortedSpecials, "sorted order", "order given")
    rejects(checks.BPETokenizer, SpecialsAlwaysAppended, "already in vocab keeps its id")
    rejects(checks.BPETokenizer, SpecialsAtTheEnd, "already in vocab keeps its id")
    rejects(checks.BPETokenizer, DecodesTokenByToken, "decoded on its own", "join all the bytes first")
    rejects(checks.BPETokenizer, StrictDecode, "not valid UTF-8", "errors='replace'")
    rejects(checks.BPETokenizer, IgnoreDecode, "dropped bytes", "errors='ignore'")
    rejects(checks.BPETokenizer, LineByLine, "each line was encoded on its own")
    rejects(checks.BPETokenizer, ChunkByChunk, "each line was encoded on its own")  # the lines show it first
    rejects(checks.BPETokenizer, DropsLineEnds, "line ends were dropped")
    rejects(checks.BPETokenizer, ReadsEverything, "before it gave the first id", "memory")
    passes(checks.BPETokenizer, Streams)  # chunks cut anywhere, as the hint says
    rejects(checks.BPETokenizer, SpecialCutAcrossChunks, "special token cut between two chunks", "hold back")
    rejects(checks.BPETokenizer, KeepsOnlyTheLastPiece, "within 3 characters", "not only the last piece")
    rejects(checks.BPETokenizer, MergedIdFromRank, "256 + its rank", "id 257", "read each merged token's id from vocab")
    rejects(checks.BPETokenizer, SpecialsSplitWithoutGroup, "special tokens are missing", "capturing group")
    rejects(checks.BPETokenizer, NonSpaceRuns, "spaces were dropped", "\\S+")
    rejects(checks.BPETokenizer, HigherDuplicate, "higher one", "lower id")
    rejects(checks.BPETokenizer, SpecialsMustBeInVocab, "next free id")
    rejects(checks.BPETokenizer, NoEncodeIterable, "encode_iterable")


def test_the_layout_bound_tokenizer_is_rejected_and_the_reference_knows_gpt2s():
    """The tokenizer of notebook 11 before it took ids from vocab passed every check; now it does not."""
    result = checks.BPETokenizer(ByteValueIds)
    assert not result.passed and "GPT-2's layout" in str(result)
    vocab, merges = ref.train_bpe("the cat sat on the mat. " * 5, 270)
    gpt2_like = {k: bytes([b]) for k, b in enumerate(sorted(range(256), key=lambda b: (b < 33, b)))}
    gpt2_like.update({i: t for i, t in vocab.items() if i >= 256})
    text = "the cat sat"
    assert ref.BPETokenizer(gpt2_like, merges).decode(ref.BPETokenizer(gpt2_like, merges).encode(text)) == text
    assert ByteValueIds(gpt2_like, merges).decode(ByteValueIds(gpt2_like, merges).encode(text)) != text


# --- bits_per_byte -------------------------------------------------------------------------------


def bpb_no_ln2(loss, n_tokens, n_bytes):
    return float(loss) * n_tokens / n_bytes


def bpb_times_ln2(loss, n_tokens, n_bytes):
    return float(loss) * n_tokens / n_bytes * math.log(2)


def bpb_per_token(loss, n_tokens, n_bytes):
    return float(loss) / math.log(2)


def bpb_upside_down(loss, n_tokens, n_bytes):
    return float(loss) * n_bytes / (n_tokens * math.log(2))


def bpb_integer_division(loss, n_tokens, n_bytes):
    return float(loss) * (n_tokens // n_bytes) / math.log(2)


def bpb_log10(loss, n_tokens, n_bytes):
    return float(loss) * n_tokens / (n_bytes * math.log(10))


def bpb_tensor(loss, n_tokens, n_bytes):
    return torch.as_tensor(loss) * n_tokens / (n_bytes * math.log(2))


def bpb_item(loss, n_tokens, n_bytes):
    return loss.item() * n_tokens / (n_bytes * math.log(2))


def bpb_string(loss, n_tokens, n_bytes):
    return f"{float(loss) * n_tokens / (n_bytes * math.log(2)):.3f}"


def test_bits_per_byte_rejects():
    rejects(checks.bits_per_byte, bpb_no_ln2, "ln 2 is missing")
    rejects(checks.bits_per_byte, bpb_times_ln2, "multiplied by ln 2")
    rejects(checks.bits_per_byte, bpb_per_token, "bits per token")
    rejects(checks.bits_per_byte, bpb_upside_down, "upside down")
    rejects(checks.bits_per_byte, bpb_integer_division, "integer division")
    rejects(checks.bits_per_byte, bpb_log10, "log base 10")
    rejects(checks.bits_per_byte, bpb_tensor, "returned a tensor", "Python float")
    rejects(checks.bits_per_byte, bpb_item, "float or a 0-d tensor")
    rejects(checks.bits_per_byte, bpb_string, "returned a string")


GPT2_FILES = SHARED / "data" / "gpt2"


@pytest.mark.skipif(not (GPT2_FILES / "encoder.json").exists(), reason="../shared/data/gpt2 is not here")
def test_a_tokenizer_that_passes_the_check_gives_tiktokens_ids_on_gpt2s_vocabulary():
    """Done when: a learner's tokenizer that passes gives tiktoken's GPT-2 ids; the layout-bound one does not."""
    from test_reference_11 import MIXED

    from tutor.data import gpt2 as gpt2_data

    passes(checks.BPETokenizer, LearnerTokenizer)
    files = gpt2_data.GPT2Files(GPT2_FILES / "encoder.json", GPT2_FILES / "vocab.bpe", "test")
    vocab, merges = ref.read_vocab_files(files.encoder, files.merges)
    enc = gpt2_data.tiktoken_gpt2(files)
    text = MIXED + (SHARED / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:200_000]
    expected = enc.encode(text, allowed_special={"<|endoftext|>"})
    assert LearnerTokenizer(vocab, merges, ["<|endoftext|>"]).encode(text) == expected
    assert ByteValueIds(vocab, merges, ["<|endoftext|>"]).encode(text) != expected
