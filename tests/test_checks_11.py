"""Checks of notebook 11: accept the reference, report the stub, reject realistic mistakes."""

import math
from collections import Counter

import pytest
import regex
import torch
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref

NAMES = ["count_pairs", "merge_pair", "train_bpe", "BPETokenizer", "bits_per_byte"]
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


def cp_mutable_default(ids, counts={}):
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


def test_merge_pair_rejects():
    rejects(checks.merge_pair, mp_overlapping, "overlapping occurrences", "[new_id, 7]")
    rejects(checks.merge_pair, mp_in_place, "changed the list it was given")
    rejects(checks.merge_pair, mp_in_place_no_return, "in place and returned None")
    rejects(checks.merge_pair, mp_first_only, "only the first occurrence")
    rejects(checks.merge_pair, mp_drops_last, "last id is missing")
    rejects(checks.merge_pair, mp_from_the_right, "from the right", "left to right")
    rejects(checks.merge_pair, mp_either_order, "(b, a)", "ordered")
    rejects(checks.merge_pair, mp_keeps_pair, "longer than the input")
    rejects(checks.merge_pair, mp_no_skip, "skip both ids")
    rejects(checks.merge_pair, mp_tuple, "should return a list")


# --- train_bpe -----------------------------------------------------------------------------------


def learner_train(text, vocab_size, special_tokens=(), *,
                  tie=lambda counts, vocab, p: (counts[p], vocab[p[0]], vocab[p[1]]),
                  pretokenize=lambda piece: PATTERN.findall(piece), split_special=True, weighted=True,
                  n_merges=None, specials_first=False, check_size=True, byte_merges=True, join_specials=False):
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
    seqs = {tuple(w.encode()): n for w, n in words.items()}
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
        seqs = {tuple(ref.merge_pair(list(s), best, new_id)): n for s, n in seqs.items()}
        merges.append((vocab[best[0]], vocab[best[1]]) if byte_merges else best)
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
    if specials_first:
        shifted = {i: s.encode() for i, s in enumerate(special_tokens)}
        shifted.update({i + len(special_tokens): b for i, b in vocab.items()})
        return shifted, merges
    for s in special_tokens:
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


def test_train_bpe_rejects():
    passes(checks.train_bpe, tb_correct)  # the learner-style trainer itself is right
    rejects(checks.train_bpe, tb_tie_smaller, "tie was broken the wrong way", "greater")
    rejects(checks.train_bpe, tb_tie_by_ids, "comparing ids", "bytes")
    rejects(checks.train_bpe, tb_first_seen, "which pair came first")
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


# --- BPETokenizer --------------------------------------------------------------------------------


class LearnerTokenizer:
    """A learner's tokenizer, written plainly; the subclasses below each make one mistake."""

    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = dict(vocab)
        self.special_tokens = list(special_tokens or [])
        self.ids = self.bytes_to_ids()
        for s in self.special_tokens:
            if s.encode() not in self.ids:
                self.vocab[len(self.vocab)] = s.encode()
                self.ids[s.encode()] = len(self.vocab) - 1
        self.ranks = {(self.ids[a], self.ids[b]): r for r, (a, b) in enumerate(merges)}
        self.merged = {(self.ids[a], self.ids[b]): self.ids[a + b] for a, b in merges}

    def bytes_to_ids(self):
        ids = {}
        for i, b in sorted(self.vocab.items()):
            ids.setdefault(b, i)
        return ids

    def special_order(self):
        return sorted(self.special_tokens, key=len, reverse=True)

    def split(self, text):
        if not self.special_tokens:
            return [text]
        pattern = "(" + "|".join(regex.escape(s) for s in self.special_order()) + ")"
        return [p for p in regex.split(pattern, text) if p]

    def pretokens(self, piece):
        return PATTERN.findall(piece)

    def encode_word(self, word):
        ids = list(word.encode())
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
        yield from self.encode("".join(lines))  # simple, if not lean on memory


class ByFrequency(LearnerTokenizer):
    def encode_word(self, word):
        ids = list(word.encode())
        while True:
            counts = ref.count_pairs(ids)
            known = [p for p in counts if p in self.ranks]
            if not known:
                return ids
            pair = max(known, key=counts.get)
            ids = ref.merge_pair(ids, pair, self.merged[pair])


class NoPretokens(LearnerTokenizer):
    def pretokens(self, piece):
        return [piece]


class SplitsSpecials(LearnerTokenizer):
    def split(self, text):
        return [text]


class ShorterSpecialFirst(LearnerTokenizer):
    def special_order(self):
        return sorted(self.special_tokens, key=len)


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


class HigherDuplicate(LearnerTokenizer):
    def bytes_to_ids(self):
        return {b: i for i, b in self.vocab.items()}  # a later id overwrites an earlier one


class SpecialsMustBeInVocab(LearnerTokenizer):
    def __init__(self, vocab, merges, special_tokens=None):
        self.vocab = dict(vocab)
        self.special_tokens = list(special_tokens or [])
        self.ids = self.bytes_to_ids()
        self.ranks = {(self.ids[a], self.ids[b]): r for r, (a, b) in enumerate(merges)}
        self.merged = {(self.ids[a], self.ids[b]): self.ids[a + b] for a, b in merges}


class NoEncodeIterable(LearnerTokenizer):
    encode_iterable = None


def test_bpe_tokenizer_rejects():
    passes(checks.BPETokenizer, LearnerTokenizer)  # the plain learner tokenizer is right
    rejects(checks.BPETokenizer, ByFrequency, "by how often each pair occurs", "order they were learned")
    rejects(checks.BPETokenizer, NoPretokens, "not pre-tokenized")
    rejects(checks.BPETokenizer, SplitsSpecials, "special token was split")
    rejects(checks.BPETokenizer, ShorterSpecialFirst, "shorter was taken", "longest first")
    rejects(checks.BPETokenizer, DecodesTokenByToken, "decoded on its own", "join all the bytes first")
    rejects(checks.BPETokenizer, StrictDecode, "not valid UTF-8", "errors='replace'")
    rejects(checks.BPETokenizer, IgnoreDecode, "dropped bytes", "errors='ignore'")
    rejects(checks.BPETokenizer, LineByLine, "each line was encoded on its own")
    rejects(checks.BPETokenizer, DropsLineEnds, "line ends were dropped")
    rejects(checks.BPETokenizer, HigherDuplicate, "higher one", "lower id")
    rejects(checks.BPETokenizer, SpecialsMustBeInVocab, "next free id")
    rejects(checks.BPETokenizer, NoEncodeIterable, "encode_iterable")


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
