"""Byte-level byte-pair encoding, as in GPT-2 (notebook 11).

The rules (the conventions of GPT-2, tiktoken and Stanford CS336's assignment 1):

- The text is first split on the special tokens, the longest first where two overlap; nothing is
  counted or merged across them, and they are not counted. Each piece is then split into
  pre-tokens with GPT-2's pattern ``GPT2_PATTERN``. Pairs are counted only inside a pre-token,
  weighted by how often that pre-token occurs.
- Each step merges the most frequent pair; a tie goes to the lexicographically greater pair,
  compared as ``(bytes, bytes)``.
- Ids, as ``train_bpe`` makes them: 0-255 are the single bytes, then one id per merge in the order
  learned, then the special tokens in the order given. ``vocab_size`` counts all three.
- ``BPETokenizer`` reads every id from ``vocab``, so any layout works: GPT-2's (its 256 single bytes
  in another order, ``"s"`` is id 82), a special token at id 0 (Stanford CS336), the course's own.
  ``BPETokenizer.from_files`` reads GPT-2's ``encoder.json`` + ``vocab.bpe``; ``save`` writes them.

``train_bpe`` is incremental: after a merge it updates the pair counts of only the pre-tokens that
contain the merged pair. ``train_bpe_naive`` recounts every pair after every merge; it gives the
same merges, slowly, and is here to be read first and timed against the other.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

import regex

# GPT-2's pre-tokenization pattern: contractions, letters, numbers, punctuation (each with an
# optional leading space), and runs of white space. `regex` knows \p{L} (any letter in any
# script) and \p{N} (any digit); the standard `re` does not.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
PRETOKEN = regex.compile(GPT2_PATTERN)


# --- the two building blocks --------------------------------------------------------------------


def count_pairs(ids: list[int], counts: dict | None = None) -> dict:
    """How often each adjacent pair occurs in ``ids``; adds to ``counts`` in place when given."""
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge_pair(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair``, left to right and not overlapping, by ``new_id``.

    ``[7, 7, 7]`` with ``(7, 7)`` gives ``[new_id, 7]``. Returns a new list.
    """
    merged = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            merged.append(new_id)
            i += 2
        else:
            merged.append(ids[i])
            i += 1
    return merged


# --- pre-tokenization ---------------------------------------------------------------------------


def _special_pattern(special_tokens):
    """A regex that finds the special tokens, trying the longest first (None when there are none)."""
    if not special_tokens:
        return None
    ordered = sorted(special_tokens, key=len, reverse=True)
    return regex.compile("|".join(regex.escape(s) for s in ordered))


def split_on_special(text: str, special_tokens=()) -> list[tuple[str, bool]]:
    """``text`` as ``(piece, is_special)`` pieces: the special tokens whole, the text between them."""
    pattern = _special_pattern(special_tokens)
    if pattern is None:
        return [(text, False)] if text else []
    pieces, start = [], 0
    for match in pattern.finditer(text):
        if match.start() > start:
            pieces.append((text[start:match.start()], False))
        pieces.append((match.group(), True))
        start = match.end()
    if start < len(text):
        pieces.append((text[start:], False))
    return pieces


def pretokenize(text: str) -> list[str]:
    """GPT-2's pre-tokens: ``"Hello, world!"`` -> ``['Hello', ',', ' world', '!']``."""
    return PRETOKEN.findall(text)


def pretoken_counts(text: str, special_tokens=(), pattern=PRETOKEN) -> Counter:
    """How often each pre-token occurs, the special tokens taken out first (and not counted)."""
    counts = Counter()
    for piece, special in split_on_special(text, special_tokens):
        if not special:
            counts.update(pattern.findall(piece))
    return counts


# --- training -----------------------------------------------------------------------------------


def _check_training_input(text, vocab_size, special_tokens):
    if not isinstance(text, str):
        raise TypeError(f"train_bpe takes the text as a str, got {type(text).__name__}"
                        + (": decode bytes first with .decode('utf-8')"
                           if isinstance(text, (bytes, bytearray)) else ""))
    if isinstance(special_tokens, str):
        raise TypeError("special_tokens is a list of strings, e.g. ['<|endoftext|>'], not one string")
    special_tokens = list(dict.fromkeys(special_tokens))  # without repeats, in the order given
    if not all(isinstance(s, str) and s for s in special_tokens):
        raise TypeError("every special token must be a non-empty str")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
    smallest = 256 + len(special_tokens)
    if vocab_size < smallest:
        raise ValueError(f"vocab_size={vocab_size} is too small: the 256 single bytes and "
                         f"{len(special_tokens)} special token(s) already need {smallest} ids")
    return special_tokens


def _words(text, special_tokens, pattern=PRETOKEN):
    """The distinct pre-tokens as lists of byte values, and how often each occurs."""
    counts = pretoken_counts(text, special_tokens, pattern)
    words = [list(token.encode("utf-8")) for token in counts]
    return words, list(counts.values())


def _finish(vocab, merges, special_tokens):
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    return vocab, merges


def train_bpe_naive(text: str, vocab_size: int, special_tokens=(), *, pattern=PRETOKEN):
    """``train_bpe`` the slow, obvious way: recount every pair of every pre-token after each merge.
    (``pattern``, a compiled ``regex``, replaces GPT-2's pre-tokenizer: the checks use it to name mistakes.)"""
    special_tokens = _check_training_input(text, vocab_size, special_tokens)
    words, freqs = _words(text, special_tokens, pattern)
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    for new_id in range(256, vocab_size - len(special_tokens)):
        counts = {}
        for word, freq in zip(words, freqs):
            for pair, n in count_pairs(word).items():
                counts[pair] = counts.get(pair, 0) + n * freq
        if not counts:
            break  # every pre-token is a single token: nothing left to merge
        best = max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))
        words = [merge_pair(word, best, new_id) for word in words]
        merges.append((vocab[best[0]], vocab[best[1]]))
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
    return _finish(vocab, merges, special_tokens)


class _Candidate:
    """A heap entry: ``heapq`` pops the smallest, so "smaller" here means "merge first":
    more frequent, and on a tie the lexicographically greater ``(bytes, bytes)``."""

    __slots__ = ("count", "key", "pair")

    def __init__(self, count, key, pair):
        self.count, self.key, self.pair = count, key, pair

    def __lt__(self, other):
        return (self.count, self.key) > (other.count, other.key)


def train_bpe(text: str, vocab_size: int, special_tokens=()):
    """Learn byte-level BPE merges from ``text``; returns ``(vocab, merges)``.

    ``vocab`` maps every id to its bytes; ``merges`` lists the merged pairs ``(bytes, bytes)`` in
    the order learned. Same result as ``train_bpe_naive``, but after each merge only the
    pre-tokens that contain the merged pair are looked at again.
    """
    special_tokens = _check_training_input(text, vocab_size, special_tokens)
    words, freqs = _words(text, special_tokens)
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []

    # Pair counts over all pre-tokens, and which pre-tokens hold each pair.
    counts = defaultdict(int)
    where = defaultdict(set)
    for i, (word, freq) in enumerate(zip(words, freqs)):
        for pair, n in count_pairs(word).items():
            counts[pair] += n * freq
            where[pair].add(i)

    # The most frequent pair is found with a heap. When a count changes we push a new entry and
    # leave the old one in: an entry whose count is no longer the pair's count is skipped.
    def candidate(pair):
        return _Candidate(counts[pair], (vocab[pair[0]], vocab[pair[1]]), pair)

    heap = [candidate(pair) for pair in counts]
    heapq.heapify(heap)

    for new_id in range(256, vocab_size - len(special_tokens)):
        best = None
        while heap:
            top = heapq.heappop(heap)
            if counts.get(top.pair, 0) == top.count > 0:
                best = top.pair
                break
        if best is None:
            break  # nothing left to merge
        merges.append((vocab[best[0]], vocab[best[1]]))
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]

        # Re-count only the pre-tokens that hold `best`: the difference between their pair counts
        # before and after the merge is all that changes.
        changed = set()
        for i in where.pop(best):
            before = count_pairs(words[i])
            words[i] = merge_pair(words[i], best, new_id)
            after = count_pairs(words[i])
            for pair in before.keys() | after.keys():
                delta = after.get(pair, 0) - before.get(pair, 0)
                if delta:
                    counts[pair] += delta * freqs[i]
                    changed.add(pair)
                    if pair in after:
                        where[pair].add(i)
        for pair in changed:
            if counts[pair] > 0:
                heapq.heappush(heap, candidate(pair))
            else:
                del counts[pair]
    return _finish(vocab, merges, special_tokens)


# --- GPT-2's files ------------------------------------------------------------------------------


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from the 256 byte values to 256 printable characters, one each.

    ``encoder.json`` and ``vocab.bpe`` are text files, and a token's bytes may be a space, a newline
    or half a UTF-8 character, none of which survives as a JSON key or a space-separated word. So
    GPT-2 writes each byte as one visible character: the 188 printable bytes (``!`` to ``~``, ``¡``
    to ``¬``, ``®`` to ``ÿ``) as themselves, the 68 others (controls, space, ...) as ``chr(256)``,
    ``chr(257)``, ... in byte order. A space is ``"Ġ"`` (``chr(288)``), a newline ``"Ċ"``.
    """
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def _to_bytes(token: str, decoder: dict[str, int]) -> bytes:
    """A token as GPT-2's files write it, back to its bytes (one not written through the table, such
    as a special token with characters outside it, is read as UTF-8)."""
    if all(ch in decoder for ch in token):
        return bytes(decoder[ch] for ch in token)
    return token.encode("utf-8")


def read_vocab_files(vocab_path, merges_path) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """``(vocab, merges)`` from GPT-2's ``encoder.json`` (``{token: id}``) and ``vocab.bpe`` (a
    ``#version`` line, then one merge per line, ``"Ġ t"``, in the order learned), the format
    ``BPETokenizer.save`` writes too (as do Hugging Face's ``vocab.json``/``merges.txt``)."""
    decoder = {ch: b for b, ch in bytes_to_unicode().items()}
    encoder = json.loads(Path(vocab_path).read_text(encoding="utf-8"))
    if not isinstance(encoder, dict):
        raise ValueError(f"{vocab_path} should hold a JSON object {{token: id}}, got a {type(encoder).__name__}")
    vocab = {}
    for token, i in encoder.items():
        if isinstance(i, bool) or not isinstance(i, int):
            raise ValueError(f"{vocab_path}: the id of {token!r} should be an int, got {i!r}")
        if i in vocab:
            raise ValueError(f"{vocab_path}: id {i} is given to two tokens, {vocab[i]!r} and {token!r}")
        vocab[i] = _to_bytes(token, decoder)
    merges = []
    lines = Path(merges_path).read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip() or (number == 1 and line.startswith("#version")):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{merges_path}, line {number}: a merge is two tokens separated by a space, "
                             f"got {line!r:.60}")
        merges.append((_to_bytes(parts[0], decoder), _to_bytes(parts[1], decoder)))
    return vocab, merges


def write_vocab_files(vocab: dict, merges: list, vocab_path, merges_path) -> None:
    """Write ``vocab`` and ``merges`` as GPT-2's ``encoder.json`` and ``vocab.bpe`` (``read_vocab_files``
    reads them back). Where two ids hold the same bytes only the lower is written, as it is the one used."""
    table = bytes_to_unicode()

    def text(token: bytes) -> str:
        return "".join(table[b] for b in token)

    encoder = {}
    for i in sorted(vocab):
        encoder.setdefault(text(vocab[i]), i)
    Path(vocab_path).write_text(json.dumps(encoder, ensure_ascii=False), encoding="utf-8")
    lines = ["#version: 0.2"] + [f"{text(a)} {text(b)}" for a, b in merges]
    Path(merges_path).write_text("\n".join(lines) + "\n", encoding="utf-8")


# --- the tokenizer ------------------------------------------------------------------------------


class BPETokenizer:
    """Encode text to ids and decode ids to text with a ``vocab`` (``{id: bytes}``) and ``merges``.

    Every id is read from ``vocab``: the 256 single bytes may have any ids (GPT-2 gives ``b"s"`` the
    id 82), and a merge's rank is its position in ``merges``, whatever the id of the merged token.
    ``special_tokens`` are kept whole (the longest first where two overlap); one missing from
    ``vocab`` gets the next free id, in the order given. Where two ids hold the same bytes, the lower
    one is used.
    """

    pattern = PRETOKEN  # GPT-2's pre-tokenizer

    def __init__(self, vocab: dict, merges: list, special_tokens=None):
        self.vocab = dict(vocab)
        self.merges = list(merges)
        self.special_tokens = list(dict.fromkeys(special_tokens or []))
        self.byte_to_id = {}
        for i in sorted(self.vocab):
            self.byte_to_id.setdefault(self.vocab[i], i)  # the lower id wins
        missing = [b for b in range(256) if bytes([b]) not in self.byte_to_id]
        if missing:
            raise ValueError(f"vocab has no id for {len(missing)} single byte(s), e.g. {bytes([missing[0]])!r}: "
                             "a byte-level vocabulary holds all 256")
        self.byte_ids = [self.byte_to_id[bytes([b])] for b in range(256)]  # byte value -> its id
        for token in self.special_tokens:
            if token.encode("utf-8") not in self.byte_to_id:
                new_id = max(self.vocab, default=-1) + 1
                self.vocab[new_id] = token.encode("utf-8")
                self.byte_to_id[token.encode("utf-8")] = new_id
        self.special_ids = {token: self.byte_to_id[token.encode("utf-8")] for token in self.special_tokens}
        # (id, id) -> its rank (the position in the list of merges) and the id it merges into
        self.ranks, self.merged = {}, {}
        for rank, (a, b) in enumerate(self.merges):
            unknown = next((t for t in (a, b, a + b) if t not in self.byte_to_id), None)
            if unknown is not None:
                raise ValueError(f"merge {rank}, {a!r} + {b!r}: {unknown!r} is not in vocab")
            pair = (self.byte_to_id[a], self.byte_to_id[b])
            if pair not in self.ranks:
                self.ranks[pair] = rank
                self.merged[pair] = self.byte_to_id[a + b]
        self._longest_special = max((len(s) for s in self.special_tokens), default=0)
        self._cache = {}

    @classmethod
    def from_files(cls, vocab_path, merges_path, special_tokens=None) -> BPETokenizer:
        """A tokenizer from GPT-2's ``encoder.json`` + ``vocab.bpe``, or the two files ``save`` wrote.
        Special tokens are not part of the format: name them (GPT-2's is ``"<|endoftext|>"``)."""
        vocab, merges = read_vocab_files(vocab_path, merges_path)
        return cls(vocab, merges, special_tokens)

    def save(self, vocab_path, merges_path) -> None:
        """Write this tokenizer's vocab and merges in GPT-2's format (``from_files`` reads them)."""
        write_vocab_files(self.vocab, self.merges, vocab_path, merges_path)

    def __len__(self):
        return len(self.vocab)

    # --- encoding ---

    def encode_pretoken(self, token: str) -> list[int]:
        """Apply the merges to one pre-token, the earliest learned first, as GPT-2 does."""
        ids = self._cache.get(token)
        if ids is not None:
            return ids
        ids = [self.byte_ids[b] for b in token.encode("utf-8")]
        ranks = self.ranks
        while len(ids) >= 2:
            pair = min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, math.inf))
            if pair not in ranks:
                break  # no pair left that was ever merged
            ids = merge_pair(ids, pair, self.merged[pair])
        if len(self._cache) < 100_000:
            self._cache[token] = ids
        return ids

    def pieces(self, text):
        """``(piece, is_special)`` for every special token and pre-token of ``text``, in order."""
        for part, special in split_on_special(text, self.special_tokens):
            if special:
                yield part, True
            else:
                for token in self.pattern.findall(part):
                    yield token, False

    def piece_ids(self, piece, special):
        """The ids of one piece of ``pieces``."""
        return [self.special_ids[piece]] if special else self.encode_pretoken(piece)

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``."""
        if not isinstance(text, str):
            hint = (": decode bytes to a str first, e.g. data.decode('utf-8')" if isinstance(text, (bytes, bytearray))
                    else ": encode_iterable takes a file or a list of lines" if isinstance(text, (list, tuple)) else "")
            raise TypeError(f"encode takes a str, got {type(text).__name__}{hint}")
        ids = []
        for piece, special in self.pieces(text):
            ids.extend(self.piece_ids(piece, special))
        return ids

    def stable_end(self, buffer: str) -> int:
        """How far ``buffer`` may be encoded now, whatever text comes after it: the pieces that end at or
        before this index are final.

        A pre-token's end can depend on up to 3 characters after it (``"'l"`` + ``"l"`` is ``"'ll"``, and the
        look-ahead of ``\\s+(?!\\S)`` needs the next character), and a special token may be only partly there
        yet (``"<|endof"``), or be the start of a longer one: the text from 3 characters before the end, or
        before where a special token may be starting, is held back.
        """
        limit = len(buffer)
        for p in range(max(0, len(buffer) - self._longest_special + 1), len(buffer)):
            tail = buffer[p:]
            if any(s.startswith(tail) and len(s) > len(tail) for s in self.special_tokens):
                limit = p
                break
        return limit - 3

    def encode_iterable(self, lines: Iterable[str]) -> Iterator[int]:
        """The ids of ``"".join(lines)``, one by one, holding about one line in memory.

        ``lines`` may be the lines of an open text file, ``encode_iterable(open(path, encoding="utf-8"))``, or
        chunks of any size, even cut inside a word or a
        special token. After each chunk, the pieces (pre-tokens and special tokens) that end at least 3
        characters before the end of the buffer (or, where a special token may be starting near its end, 3
        characters before that place) are encoded and yielded; the rest stays in the buffer for the next chunk.
        So the ids are exactly those of ``encode``.
        """
        if isinstance(lines, str):
            lines = [lines]
        buffer = ""
        try:
            for chunk in lines:
                if not isinstance(chunk, str):
                    raise TypeError(f"encode_iterable takes chunks of text (str), got {type(chunk).__name__}"
                                    + (": open the file in text mode, open(path, encoding='utf-8')"
                                       if isinstance(chunk, (bytes, bytearray)) else ""))
                buffer += chunk
                stable = self.stable_end(buffer)
                done = 0
                for piece, special in self.pieces(buffer):
                    if done + len(piece) > stable:
                        break
                    yield from self.piece_ids(piece, special)
                    done += len(piece)
                buffer = buffer[done:]
        except UnicodeDecodeError as error:
            raise ValueError(f"the text is not valid UTF-8 ({error.reason} at byte {error.start} of a chunk): "
                             "open the file with the right encoding, or with errors='replace'") from error
        for piece, special in self.pieces(buffer):
            yield from self.piece_ids(piece, special)

    # --- decoding ---

    def decode(self, ids) -> str:
        """The text of ``ids``: the bytes of every id joined, then decoded as UTF-8 (errors replaced)."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        if isinstance(ids, int):
            ids = [ids]
        chunks = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"decode takes a list of int ids, but it holds a {type(i).__name__}: {i!r:.40}")
            if i not in self.vocab:
                raise ValueError(f"id {i} is not in the vocabulary (ids go from 0 to {max(self.vocab)})")
            chunks.append(self.vocab[i])
        # Join first, then decode: one character may be split over two tokens.
        return b"".join(chunks).decode("utf-8", errors="replace")

    def token_strings(self, ids) -> list[str]:
        """Each id on its own, for display (a partial UTF-8 character shows as '�')."""
        return [self.vocab[i].decode("utf-8", errors="replace") for i in ids]

    # --- interop ---

    def mergeable_ranks(self) -> dict[bytes, int]:
        """``{bytes: id}`` for every byte and merged token, as ``tiktoken.Encoding`` wants it (tiktoken
        takes a token's id as its merge rank: right for ``train_bpe``'s layout and GPT-2's)."""
        specials = set(self.special_ids.values())
        return {b: i for b, i in self.byte_to_id.items() if i not in specials}


def bits_per_byte(loss, n_tokens: int, n_bytes: int) -> float:
    """A mean loss in nats per token, over a text of ``n_bytes`` UTF-8 bytes that was ``n_tokens``
    tokens, in bits per byte: ``loss * n_tokens / (n_bytes * ln 2)``. Fair across tokenizers."""
    if n_bytes <= 0:
        raise ValueError(f"n_bytes must be positive, got {n_bytes}")
    return float(loss) * n_tokens / (n_bytes * math.log(2))


def read_text(path) -> str:
    """A UTF-8 text file as a str; a file that is not valid UTF-8 is a clear ``ValueError``."""
    data = open(path, "rb").read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not valid UTF-8 text ({error.reason} at byte {error.start}: "
                         f"{data[error.start:error.start + 4]!r}); convert it to UTF-8, or read it with "
                         "open(path, encoding='utf-8', errors='replace') to accept '�' for the bad bytes") from None
