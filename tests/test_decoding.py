"""The fixed-size cache and compiled decoding step (issue 44): the same tokens as notebook 09's cached generation,
greedy, on the course's GPT with GPT-2's shape (small here); compiled once on a CPU too, where a C++ compiler is."""

import shutil

import pytest
import torch

from tutor import reference as ref
from tutor.train.decoding import StaticKVCache, decode, generate_static


def gpt(**sizes):
    torch.manual_seed(0)
    config = ref.GPTConfig.gpt2(**{"d_model": 32, "n_heads": 4, "n_layers": 2, "vocab_size": 97, "max_len": 24,
                                   **sizes})
    return ref.GPT(config).eval()


def greedy_cached(model, ids, n):
    return ref.generate_cached(model, ids, n, top_k=1)


@pytest.mark.parametrize("batch, prompt, new", [(1, 5, 10), (3, 1, 8), (2, 7, 17)])
def test_static_decoding_gives_the_cached_generation_s_tokens(batch, prompt, new):
    model = gpt()
    ids = torch.randint(0, 97, (batch, prompt), generator=torch.Generator().manual_seed(prompt))
    assert torch.equal(generate_static(model, ids, new, compile=False), greedy_cached(model, ids, new))


def test_the_logits_of_each_step_equal_a_full_forward_pass():
    model = gpt()
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(1))
    cache = StaticKVCache.for_model(model, 2)
    with torch.no_grad():
        decode(model, cache, ids[:, :4], torch.arange(4))
        for t in range(4, 9):
            got = decode(model, cache, ids[:, t:t + 1], torch.tensor([t]))
            torch.testing.assert_close(got, model(ids[:, :t + 1])[:, -1, :], atol=1e-5, rtol=1e-4)


def test_a_cache_used_again_gives_the_same_tokens():
    model = gpt()
    cache = StaticKVCache.for_model(model, 1)
    first = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(3))
    second = torch.randint(0, 97, (1, 3), generator=torch.Generator().manual_seed(4))
    generate_static(model, first, 12, compile=False, cache=cache)  # leaves positions 6 .. 17 written
    assert torch.equal(generate_static(model, second, 9, compile=False, cache=cache), greedy_cached(model, second, 9))


def test_what_does_not_fit_is_an_error_and_the_mode_is_kept():
    model = gpt().train()
    with pytest.raises(ValueError, match="do not fit"):
        generate_static(model, torch.zeros(1, 20, dtype=torch.long), 5, compile=False)
    generate_static(model, torch.zeros(1, 2, dtype=torch.long), 3, compile=False)
    assert model.training


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="torch.compile on a CPU needs a C++ compiler")
def test_the_compiled_step_gives_the_same_tokens():
    model = gpt()
    ids = torch.randint(0, 97, (1, 4), generator=torch.Generator().manual_seed(2))
    assert torch.equal(generate_static(model, ids, 6, compile=True), greedy_cached(model, ids, 6))
