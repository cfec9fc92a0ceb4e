"""The reference tokenizer with GPT-2's real vocabulary (../shared/data/gpt2): the same ids as
``tiktoken.get_encoding("gpt2")``, in GPT-2's layout and with its special token moved to id 0; the files
read and written; and tutor.data.gpt2, which finds the files or says in one line that it cannot."""

import json

import pytest
from test_reference_11 import EOT, MIXED

from conftest import SHARED
from tutor.data import gpt2 as gpt2_data
from tutor.reference.bpe import BPETokenizer, bytes_to_unicode, read_vocab_files, train_bpe

tiktoken = pytest.importorskip("tiktoken")

GPT2 = SHARED / "data" / "gpt2"
SHAKESPEARE = SHARED / "data" / "tinyshakespeare.txt"
needs_gpt2 = pytest.mark.skipif(not (GPT2 / "encoder.json").exists(), reason="../shared/data/gpt2 is not here")
CODE_AND_EMOJI = ('def encode(self, text: str) -> list[int]:\n    return [self.ids[b] for b in text]  # 😀🎉\n'
                  '\tif x == 0x1F600: print(f"{x!r:>10}")\n')


@pytest.fixture(scope="module")
def files():
    if not (GPT2 / "encoder.json").exists():
        pytest.skip("../shared/data/gpt2 is not here")
    return gpt2_data.GPT2Files(GPT2 / "encoder.json", GPT2 / "vocab.bpe", "test")


@pytest.fixture(scope="module")
def gpt2_tok(files):
    return BPETokenizer.from_files(files.encoder, files.merges, [EOT])


@pytest.fixture(scope="module")
def enc(files):
    return gpt2_data.tiktoken_gpt2(files)


def test_the_byte_table_is_gpt2s():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("A")] == "A" and table[0] == chr(256)
    assert all(ch.isprintable() and not ch.isspace() for ch in table.values())


@needs_gpt2
def test_ids_come_from_vocab(gpt2_tok):
    assert gpt2_tok.encode("s") == [82] and gpt2_tok.byte_to_id[b"!"] == 0  # not id = byte value
    assert len(gpt2_tok) == 50257 and gpt2_tok.special_ids == {EOT: 50256}
    assert gpt2_tok.decode(gpt2_tok.encode("Hello, how are you?")) == "Hello, how are you?"
    assert gpt2_tok.encode("Hello world") == [15496, 995]


@needs_gpt2
def test_same_ids_as_tiktoken_on_all_of_tiny_shakespeare(gpt2_tok, enc):
    text = SHAKESPEARE.read_text(encoding="utf-8")
    ids = gpt2_tok.encode(text)
    assert ids == enc.encode_ordinary(text)
    assert len(ids) == 338_025 and gpt2_tok.decode(ids) == text


@needs_gpt2
@pytest.mark.parametrize("text", [MIXED, CODE_AND_EMOJI, f"{EOT}{EOT}a{EOT} b", "", "  \n\n \t x"])
def test_same_ids_as_tiktoken_on_mixed_scripts_code_and_the_special_token(gpt2_tok, enc, text):
    ids = gpt2_tok.encode(text)
    assert ids == enc.encode(text, allowed_special={EOT})
    assert gpt2_tok.decode(ids) == text
    assert list(gpt2_tok.encode_iterable(text.splitlines(keepends=True))) == ids


@needs_gpt2
def test_special_token_at_id_0(files, enc):
    """Stanford CS336's layout: the special token first, everything else one id later."""
    vocab, merges = read_vocab_files(files.encoder, files.merges)
    shifted = {0: EOT.encode()} | {i + 1: token for i, token in vocab.items() if token != EOT.encode()}
    tok = BPETokenizer(shifted, merges, [EOT])
    assert tok.special_ids == {EOT: 0}
    for text in (MIXED, CODE_AND_EMOJI, SHAKESPEARE.read_text(encoding="utf-8")[:50_000]):
        expected = [0 if i == 50256 else i + 1 for i in enc.encode(text, allowed_special={EOT})]
        assert tok.encode(text) == expected
        assert tok.decode(expected) == text


@needs_gpt2
def test_merged_ids_in_any_order(files, enc):
    """A merge's rank is its place in `merges`, not the id of the merged token: reverse the merged ids."""
    vocab, merges = read_vocab_files(files.encoder, files.merges)
    last = 50255
    renumbered = {(last - i + 256 if 256 <= i <= last else i): token for i, token in vocab.items()}
    tok = BPETokenizer(renumbered, merges, [EOT])
    expected = [last - i + 256 if 256 <= i <= last else i for i in enc.encode(MIXED, allowed_special={EOT})]
    assert tok.encode(MIXED) == expected and tok.decode(expected) == MIXED


@needs_gpt2
def test_save_writes_gpt2s_files_back(files, gpt2_tok, tmp_path):
    gpt2_tok.save(tmp_path / "encoder.json", tmp_path / "vocab.bpe")
    assert (tmp_path / "vocab.bpe").read_bytes() == files.merges.read_bytes()  # byte for byte
    assert json.loads((tmp_path / "encoder.json").read_text("utf-8")) == json.loads(files.encoder.read_text("utf-8"))
    again = BPETokenizer.from_files(tmp_path / "encoder.json", tmp_path / "vocab.bpe", [EOT])
    assert again.vocab == gpt2_tok.vocab and again.merges == gpt2_tok.merges
    # and tiktoken reads the files save wrote
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(str(tmp_path / "vocab.bpe"), str(tmp_path / "encoder.json"))
    assert ranks == gpt2_tok.mergeable_ranks()


def test_save_and_from_files_round_trip_a_trained_tokenizer(tmp_path):
    text = MIXED * 3
    vocab, merges = train_bpe(text, 256 + 80 + 2, [EOT, "<|pad|>"])
    tok = BPETokenizer(vocab, merges, [EOT, "<|pad|>"])
    tok.save(tmp_path / "v.json", tmp_path / "m.txt")
    again = BPETokenizer.from_files(tmp_path / "v.json", tmp_path / "m.txt", [EOT, "<|pad|>"])
    assert again.vocab == tok.vocab and again.merges == tok.merges
    assert again.encode(text) == tok.encode(text) and again.decode(tok.encode(text)) == text
    assert any(b" " in a + b or b"\n" in a + b for a, b in merges)  # spaces and newlines survive the files


def test_read_vocab_files_names_what_is_wrong(tmp_path):
    table = bytes_to_unicode()
    good = {table[b]: b for b in range(256)}
    (tmp_path / "v.json").write_text(json.dumps(good | {"ab": 256}), encoding="utf-8")
    (tmp_path / "m.txt").write_text("#version: 0.2\na b c\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2: a merge is two tokens"):
        read_vocab_files(tmp_path / "v.json", tmp_path / "m.txt")
    (tmp_path / "bad.json").write_text(json.dumps({"a": "1"}), encoding="utf-8")
    with pytest.raises(ValueError, match="should be an int"):
        read_vocab_files(tmp_path / "bad.json", tmp_path / "m.txt")
    (tmp_path / "m.txt").write_text("#version: 0.2\na b\nx y\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"merge 1, b'x' \+ b'y': b'xy' is not in vocab"):
        BPETokenizer.from_files(tmp_path / "v.json", tmp_path / "m.txt")
    (tmp_path / "short.json").write_text(json.dumps({"a": 0}), encoding="utf-8")
    with pytest.raises(ValueError, match="no id for 255 single byte"):
        BPETokenizer.from_files(tmp_path / "short.json", tmp_path / "m.txt")


def test_gpt2_files_say_in_one_line_when_they_are_not_here(monkeypatch, tmp_path, capsys):
    for var in ("TUTOR_GPT2_ENCODER", "TUTOR_GPT2_MERGES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TUTOR_CACHE_DIR", str(tmp_path))
    assert gpt2_data.gpt2_files(offline=True) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "not here" in out and "skipped" in out and "TUTOR_GPT2_ENCODER" in out


@needs_gpt2
def test_gpt2_files_from_the_environment_and_the_cache(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TUTOR_GPT2_ENCODER", str(GPT2 / "encoder.json"))
    monkeypatch.setenv("TUTOR_GPT2_MERGES", str(GPT2 / "vocab.bpe"))
    found = gpt2_data.gpt2_files()
    assert found.encoder == GPT2 / "encoder.json" and "TUTOR_GPT2_ENCODER" in capsys.readouterr().out
    assert found.notice == "GPT-2's vocabulary: encoder.json (TUTOR_GPT2_ENCODER); vocab.bpe (TUTOR_GPT2_MERGES)"
    # a download (here: served from the shared files) lands in the cache, checksum verified
    for var in ("TUTOR_GPT2_ENCODER", "TUTOR_GPT2_MERGES"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("TUTOR_CACHE_DIR", str(tmp_path))
    served = {gpt2_data.ENCODER.urls[0]: GPT2 / "encoder.json", gpt2_data.MERGES.urls[0]: GPT2 / "vocab.bpe"}
    monkeypatch.setattr(gpt2_data.sources, "download", lambda url, timeout: served[url].read_bytes())
    found = gpt2_data.gpt2_files(offline=False)
    assert found.encoder == tmp_path / "gpt2-encoder.json"
    assert found.merges.read_bytes() == (GPT2 / "vocab.bpe").read_bytes()
    assert found.notice.startswith("GPT-2's vocabulary: encoder.json downloaded from ")
    assert "; vocab.bpe downloaded from " in found.notice
    monkeypatch.setattr(gpt2_data.sources, "download", lambda url, timeout: pytest.fail("downloaded twice"))
    assert "from the cache" in gpt2_data.gpt2_files(offline=False).notice
