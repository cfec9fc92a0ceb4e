"""The byte-pair encoding reference of notebook 11, checked against tiktoken (Rust) as an oracle,
with property tests (hypothesis) and the bad inputs a learner may give it."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SHARED
from tutor.reference import bpe
from tutor.reference.bpe import (
    GPT2_PATTERN,
    BPETokenizer,
    bits_per_byte,
    count_pairs,
    merge_pair,
    read_text,
    train_bpe,
    train_bpe_naive,
)

tiktoken = pytest.importorskip("tiktoken")

SHAKESPEARE = SHARED / "data" / "tinyshakespeare.txt"
EOT = "<|endoftext|>"
MIXED = ("Héllo wörld! Ça coûte 3,14159 € — naïve café. 12345 + 67890 = 80235.\n"
         "日本語のテキストと中文文本。 Привет, мир! مرحبا بالعالم. 😀🎉👍🏽 emoji 🇫🇷\n"
         "   leading spaces,\ttabs\t\tand   runs    of     spaces\n\n\n  \n"
         f"don't we'll they're I've she's{EOT}after the end{EOT}{EOT}<|pad|>x <|pad|>\n"
         "the end.   ")
SMALL = ("the cat sat on the mat. the cat ate the rat! that's that, isn't it? "
         "3 cats, 33 rats and 333 mats.\n\n  Then  the  end.") * 3


def oracle(tok: BPETokenizer):
    """tiktoken built from the reference's own merges, with the same pattern and special tokens."""
    return tiktoken.Encoding("reference-bpe", pat_str=GPT2_PATTERN, mergeable_ranks=tok.mergeable_ranks(),
                             special_tokens=tok.special_ids)


@pytest.fixture(scope="module")
def mixed_tokenizer():
    vocab, merges = train_bpe(MIXED * 4 + SMALL, 256 + 150 + 2, [EOT, "<|pad|>"])
    return BPETokenizer(vocab, merges, [EOT, "<|pad|>"])


# --- the building blocks ---------------------------------------------------------------------


def test_count_pairs_and_merge_pair():
    assert count_pairs([1, 2, 3, 1, 2]) == {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    counts = {(1, 2): 5}
    assert count_pairs([1, 2], counts) is counts and counts == {(1, 2): 6}
    assert count_pairs([7]) == {} and count_pairs([]) == {}
    ids = [7, 7, 7]
    assert merge_pair(ids, (7, 7), 300) == [300, 7] and ids == [7, 7, 7]
    assert merge_pair([7, 7, 7, 7], (7, 7), 300) == [300, 300]
    assert merge_pair([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]


def test_train_bpe_ids_ties_and_specials():
    vocab, merges = train_bpe("ab ab cd cd", 256 + 3, ["<s>"])
    # (a,b) and (c,d) occur twice each, (' ', a) and (' ', c) once; the tie goes to the greater (c, d)
    assert merges[:2] == [(b"c", b"d"), (b"a", b"b")]
    assert vocab[256] == b"cd" and vocab[257] == b"ab" and vocab[258] == b"<s>"
    assert len(vocab) == 259 and all(vocab[i] == bytes([i]) for i in range(256))


def test_train_bpe_does_not_count_across_special_tokens_or_pretokens():
    # "xy" never occurs inside a pre-token: the pairs around the special token are never counted
    vocab, merges = train_bpe("x<|s|>y x<|s|>y", 256 + 10, ["<|s|>"])
    assert (b"x", b"y") not in merges and b"<|" not in [a + b for a, b in merges]
    assert merges == [(b" ", b"x")]  # the only pair inside a pre-token; then nothing is left


def test_incremental_equals_naive():
    text = read_text(SHAKESPEARE)[:60_000] if SHAKESPEARE.exists() else SMALL * 50
    assert train_bpe(text, 256 + 120, [EOT]) == train_bpe_naive(text, 256 + 120, [EOT])
    assert train_bpe(MIXED, 256 + 80) == train_bpe_naive(MIXED, 256 + 80)


def test_training_stops_when_nothing_is_left():
    vocab, merges = train_bpe("aaaa", 1000)
    assert merges == [(b"a", b"a"), (b"aa", b"aa")] and len(vocab) == 258


# --- tiktoken as the oracle -------------------------------------------------------------------


def test_same_ids_as_tiktoken_on_mixed_text(mixed_tokenizer):
    tok = mixed_tokenizer
    for text in [MIXED, SMALL, "", " ", "\n\n", "12345678901234567890", "😀" * 7, EOT * 3, "  a  b   c    "]:
        ids = tok.encode(text)
        assert ids == oracle(tok).encode(text, allowed_special="all"), repr(text)
        assert tok.decode(ids) == text
        assert list(tok.encode_iterable(text.splitlines(keepends=True))) == ids


@pytest.mark.skipif(not SHAKESPEARE.exists(), reason="tiny Shakespeare is not at ../shared/data/tinyshakespeare.txt")
@pytest.mark.parametrize("vocab_size", [512, 1024])
def test_same_ids_as_tiktoken_on_all_of_tiny_shakespeare(vocab_size):
    text = read_text(SHAKESPEARE)
    vocab, merges = train_bpe(text, vocab_size, [EOT])
    tok = BPETokenizer(vocab, merges, [EOT])
    ids = tok.encode(text)
    assert ids == oracle(tok).encode_ordinary(text)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8")) / 1.9  # BPE compresses: about 2 bytes per token at 512
    with open(SHAKESPEARE, encoding="utf-8") as f:
        assert list(tok.encode_iterable(f)) == ids


# --- special tokens ---------------------------------------------------------------------------


def test_overlapping_special_tokens_take_the_longest():
    double = EOT + EOT
    vocab, merges = train_bpe(SMALL, 300, [EOT, double])
    tok = BPETokenizer(vocab, merges, [EOT, double])
    assert tok.encode(double) == [tok.special_ids[double]]
    assert tok.encode(EOT * 3) == [tok.special_ids[double], tok.special_ids[EOT]]
    assert tok.decode(tok.encode("a" + EOT * 3 + "b")) == "a" + EOT * 3 + "b"
    assert list(tok.encode_iterable(["a<|endof", "text|><|endoftext", "|>b"])) == tok.encode("a" + double + "b")


def test_special_token_missing_from_vocab_gets_the_next_id_and_duplicates_use_the_lower():
    vocab, merges = train_bpe(SMALL, 280)
    tok = BPETokenizer(vocab, merges, [EOT, "the"])
    assert len(vocab) == 280 and tok.special_ids[EOT] == 280
    the = tok.byte_to_id[b"the"]
    assert the < 280 and tok.special_ids["the"] == the  # "the" is already a merged token
    vocab[300] = b"the"  # a second id holding the same bytes
    tok = BPETokenizer(vocab, merges, ["the"])
    assert tok.special_ids["the"] == the and tok.encode("the") == [the]


def test_decode_joins_bytes_before_decoding():
    tok = BPETokenizer({i: bytes([i]) for i in range(256)}, [])
    ids = tok.encode("é😀")
    assert ids == [0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80]
    assert tok.decode(ids) == "é😀"
    assert tok.decode(ids[:1]) == "\ufffd"  # half a character: replaced, not an exception
    assert tok.decode(torch.tensor(ids)) == "é😀"


# --- properties (hypothesis) -------------------------------------------------------------------

TEXT = (st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
        | st.text("ab '\n 1é😀<|>", max_size=40))
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(text=TEXT)
def test_decode_encode_roundtrip(mixed_tokenizer, text):
    assert mixed_tokenizer.decode(mixed_tokenizer.encode(text)) == text


@FAST
@given(text=TEXT, cuts=st.lists(st.integers(0, 60), max_size=5))
def test_encode_iterable_equals_encode(mixed_tokenizer, text, cuts):
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    chunks = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    assert list(mixed_tokenizer.encode_iterable(chunks)) == mixed_tokenizer.encode(text)


def test_encode_iterable_takes_chunks_cut_anywhere_and_holds_back_only_a_few_characters(mixed_tokenizer, tmp_path):
    """The contract: chunks may be cut anywhere (a file's lines, or blocks of any size that cut words, contractions
    and special tokens); the ids are those of encode, and what waits in the buffer is the last few characters."""
    tok = mixed_tokenizer
    path = tmp_path / "mixed.txt"
    path.write_text(MIXED * 3, encoding="utf-8", newline="")
    ids = tok.encode(MIXED * 3)
    for size in (1, 2, 3, 5, 7, 13, 64, 10_000):
        with open(path, encoding="utf-8", newline="") as f:
            assert list(tok.encode_iterable(iter(lambda: f.read(size), ""))) == ids, size
    assert list(tok.encode_iterable(["We'l", "l see<|endof", "text|>"])) == tok.encode("We'll see" + EOT)
    # when the next chunk is asked for, all but the last few characters have been yielded: 3, and the pre-token
    # they end
    text = "the cat sat on the mat, and we'll see. " * 20
    out, asked = [], []

    def chunks():
        for k in range(0, len(text), 10):
            asked.append((k, len(out)))  # (characters given so far, ids yielded so far)
            yield text[k:k + 10]

    out.extend(tok.encode_iterable(chunks()))
    assert out == tok.encode(text)
    for n_chars, n_ids in asked[1:]:
        settled = tok.decode(out[:n_ids])
        assert text.startswith(settled) and n_chars - len(settled) <= 3 + max(map(len, bpe.pretokenize(text)))


@FAST
@given(text=TEXT)
def test_same_ids_as_tiktoken_on_any_text(mixed_tokenizer, text):
    assert mixed_tokenizer.encode(text) == oracle(mixed_tokenizer).encode(text, allowed_special="all")


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, 4), max_size=30), a=st.integers(0, 4), b=st.integers(0, 4))
def test_merge_pair_never_lengthens(ids, a, b):
    merged = merge_pair(ids, (a, b), 9)
    assert len(merged) <= len(ids)
    assert len(ids) - len(merged) == merged.count(9)
    unmerged = [x for i in merged for x in ((a, b) if i == 9 else (i,))]
    assert unmerged == ids


# --- bits per byte ------------------------------------------------------------------------------


def test_bits_per_byte():
    assert bits_per_byte(math.log(2), 10, 10) == pytest.approx(1.0)
    assert bits_per_byte(torch.tensor(1.8), 100, 100) == pytest.approx(1.8 / math.log(2))
    assert isinstance(bits_per_byte(torch.tensor(1.0), 3, 7), float)
    assert bits_per_byte(2.0, 50, 200) == pytest.approx(2.0 * 50 / (200 * math.log(2)))
    with pytest.raises(ValueError, match="n_bytes must be positive"):
        bits_per_byte(1.0, 0, 0)


# --- bad input: a clear message, never a wrong answer -------------------------------------------


def test_bad_input(mixed_tokenizer, tmp_path):
    tok = mixed_tokenizer
    with pytest.raises(ValueError, match="vocab_size=257 is too small.*258"):
        train_bpe("abc", 257, [EOT, "x"])
    with pytest.raises(ValueError, match="too small"):
        train_bpe("abc", 100)
    with pytest.raises(TypeError, match="vocab_size must be an int"):
        train_bpe("abc", 300.0)
    with pytest.raises(TypeError, match="special_tokens is a list"):
        train_bpe("abc", 300, EOT)
    with pytest.raises(TypeError, match="takes the text as a str.*decode"):
        train_bpe(b"abc", 300)
    with pytest.raises(TypeError, match="encode takes a str, got bytes.*decode"):
        tok.encode(b"abc")
    with pytest.raises(TypeError, match="encode takes a str, got list.*encode_iterable"):
        tok.encode(["a", "b"])
    with pytest.raises(TypeError, match="encode takes a str, got int"):
        tok.encode(5)
    with pytest.raises(ValueError, match="id 99999 is not in the vocabulary"):
        tok.decode([1, 99999])
    with pytest.raises(ValueError, match="id -1 is not in the vocabulary"):
        tok.decode([-1])
    with pytest.raises(TypeError, match="decode takes a list of int ids"):
        tok.decode(["a"])
    assert tok.encode("") == [] and tok.decode([]) == "" and list(tok.encode_iterable([])) == []
    assert train_bpe("", 300) == ({i: bytes([i]) for i in range(256)}, [])

    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café au lait\n".encode("latin-1"))
    with pytest.raises(ValueError, match="not valid UTF-8.*byte 3"):
        read_text(latin1)
    with pytest.raises(ValueError, match="not valid UTF-8"):
        list(tok.encode_iterable(open(latin1, encoding="utf-8")))
    with pytest.raises(TypeError, match="open the file in text mode"):
        list(tok.encode_iterable(open(latin1, "rb")))


def test_pretokenizer_is_gpt2s_pattern():
    assert bpe.GPT2_PATTERN == r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    assert bpe.PRETOKEN.findall("We'll   see 42 birds!") == ["We", "'ll", "  ", " see", " 42", " birds", "!"]


# --- the payoff's plumbing (the training itself runs in the notebook and benchmarks/bpe.py --payoff) ---


def test_payoff_tokenizations_and_budget():
    from tutor.train import bpe_vs_chars as payoff

    train_text, val_text = payoff.split(SMALL * 4)
    assert train_text + val_text == SMALL * 4 and len(val_text) == pytest.approx(len(SMALL) * 0.4, abs=1)
    chars = payoff.characters(train_text, val_text)
    assert chars.decode(chars.train.tolist()) == train_text and chars.bytes_per_token == 1.0
    assert chars.val_bytes == len(val_text.encode("utf-8"))
    tokens = payoff.bpe(train_text, val_text, 300)
    assert tokens.decode(tokens.val.tolist()) == val_text and tokens.bytes_per_token > 1.5
    config = payoff.PayoffConfig(block_size=8, batch_size=2)
    assert payoff.steps_for(10 * 1000 * 2 * 8, 1000, config) == 10
    model = payoff.make_model(tokens, config)
    assert model.head.out_features == 300 and model.config.max_len == 8
    # notebook 10's FLOPs per token: 6 N + 12 L d T
    assert payoff.flops_per_token(1000, 2, 16, 8) == 6 * 1000 + 12 * 2 * 16 * 8


def test_the_sweep_runs_each_setting_with_each_seed(capsys):
    """The table of notebook 11's section 9: one run of `train` per setting and seed, at the notebook's budget."""
    from tutor.train import bpe_vs_chars as payoff

    chosen = [(None, payoff.CHAR_CONFIG.block_size, payoff.CHAR_CONFIG.batch_size, payoff.CHAR_CONFIG.max_lr),
              (payoff.BPE_VOCAB, payoff.BPE_CONFIG.block_size, payoff.BPE_CONFIG.batch_size, payoff.BPE_CONFIG.max_lr)]
    assert all(setting in payoff.SWEEP for setting in chosen)  # the notebook's settings are rows of its table
    train_text, val_text = payoff.split(SMALL * 20)
    results = payoff.sweep(train_text, val_text, 3e7, settings=[(None, 8, 2, 3e-3), (300, 8, 2, 1e-2)], seeds=(0, 1))
    assert [(setting[0], seed) for setting, seed, _ in results] == [(None, 0), (None, 1), (300, 0), (300, 1)]
    assert all(run.config.min_lr == setting[3] / 10 and run.config.seed == seed for setting, seed, run in results)
    assert results[0][2].final != results[1][2].final  # another seed, another run
    assert capsys.readouterr().out.count("bits per byte") == 4


def test_token_pictures():
    import matplotlib

    matplotlib.use("Agg")
    from tutor.viz import bpe as pictures

    vocab, merges = train_bpe(SMALL, 300, [EOT])
    tok = BPETokenizer(vocab, merges, [EOT])
    fig = pictures.token_figure(tok, "the cat\n  sat 😀" + EOT)
    assert fig.axes[0].get_title().endswith("bytes per token)")
    assert len(fig.axes[0].texts) == len(tok.encode("the cat\n  sat 😀" + EOT))
    fig = pictures.merges_figure(merges, pictures.token_counts(tok, tok.encode(SMALL)), n=5)
    assert len(fig.axes[0].patches) == 5
    widget = pictures.token_explorer(tok, "the cat")
    assert "image/png" in widget._repr_mimebundle_()
