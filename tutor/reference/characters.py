"""Characters as numbers: the alphabet, encode, decode and one-hot vectors (notebook 01).

The alphabet of the names data set is written here once; everything else derives from it.
"""

import string

import torch

LETTERS = string.ascii_lowercase  # the 26 letters a name is made of
# ' ' (index 0) marks start, end and input padding; '.' (last index) pads targets.
alphabet = [" "] + sorted(LETTERS) + ["."]
stoi = {ch: i for i, ch in enumerate(alphabet)}
itos = {i: ch for ch, i in stoi.items()}
vocab_size = len(alphabet)  # 28
PAD_X = stoi[" "]  # padding of inputs, and the start/end token
PAD_Y = stoi["."]  # padding of targets: the ignore_index of the loss


def encode(name: str) -> list[int]:
    """'laika' -> [12, 1, 9, 11, 1]. Upper case is lowercased first."""
    return [stoi[ch] for ch in name.lower()]


def decode(ids) -> str:
    """[12, 1, 9, 11, 1] -> 'laika'. Accepts a list of ints or a 1-D tensor."""
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    return "".join(itos[int(i)] for i in ids)


def one_hot(ids: torch.Tensor, num_classes: int) -> torch.Tensor:
    """LongTensor [..., T] -> float32 [..., T, num_classes] with a single 1 per row."""
    out = torch.zeros(*ids.shape, num_classes, device=ids.device)
    out.scatter_(-1, ids.unsqueeze(-1), 1.0)
    return out
