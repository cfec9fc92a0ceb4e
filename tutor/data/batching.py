"""Batches of names (notebooks 08 and 09): padded, length-sorted ("sortish") and packed.

A name becomes ``x = ' ' + name`` and ``y = name + ' '`` (``NamesDataset``); ``collate`` pads ``x`` with
``PAD_X`` (' ') and ``y`` with ``PAD_Y`` ('.', the ``ignore_index`` of the loss). ``make_sortish_loader``
batches names of about the same length, so that little is padding; ``make_packed_loader`` lays several
names end to end in each row, so that almost nothing is, and ``name_positions`` and ``same_name_mask`` keep
each name to itself inside a row.
"""

from __future__ import annotations

from functools import partial

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset, Sampler

from tutor.reference import PAD_X, PAD_Y, encode
from tutor.reference.characters import LETTERS

# -----------------------------------------------------------------------------
# padded batches: one name per row

class NamesDataset(Dataset):
    """Item ``i`` is ``(x, y)``: LongTensors ``encode(' ' + name)`` and ``encode(name + ' ')``.

    >>> NamesDataset(["laika"])[0]
    (tensor([ 0, 12,  1,  9, 11,  1]), tensor([12,  1,  9, 11,  1,  0]))
    """

    def __init__(self, names):
        self.names = list(names)
        for name in self.names:
            if not name or not set(name.lower()) <= set(LETTERS):
                raise ValueError(
                    f"NamesDataset needs non-empty names made of the letters a-z, got {name!r} "
                    "(load_names() cleans names for you)"
                )
        self._items = [None] * len(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i):
        # Each name is encoded once, on first use (a training run visits every name many times).
        # pad_sequence copies the tensors into the batch, so the cached ones are never modified.
        item = self._items[i]
        if item is None:
            name = self.names[i]
            x = torch.tensor(encode(" " + name), dtype=torch.long)
            y = torch.tensor(encode(name + " "), dtype=torch.long)
            item = self._items[i] = (x, y)
        return item


def collate(batch) -> tuple[torch.Tensor, torch.Tensor]:
    """A list of ``(x, y)`` pairs -> ``X [B, T]`` padded with PAD_X, ``Y [B, T]`` padded with PAD_Y.

    ``T`` is the longest ``x`` in the batch.
    """
    xs, ys = zip(*batch)
    X = pad_sequence(xs, batch_first=True, padding_value=PAD_X)
    Y = pad_sequence(ys, batch_first=True, padding_value=PAD_Y)
    return X, Y


def worker_options(num_workers: int) -> dict:
    """The ``DataLoader`` arguments for making batches in ``num_workers`` background processes (none for 0).

    Each worker keeps 4 batches ready, so a GPU step does not wait for Python to make its batch (notebook 08's GPU
    preset); pinned memory when there is a GPU to copy to. The batches and their order are the same as with 0
    workers, pass after pass: that is why the workers start again with each pass (about 0.15 s on a 2-core CPU).
    Workers kept alive from one pass to the next (``persistent_workers``) would skip the random draw a new pass makes
    from the loader's generator, and so shuffle the second pass differently.
    """
    if num_workers <= 0:
        return {}
    return {"num_workers": num_workers, "prefetch_factor": 4, "pin_memory": torch.cuda.is_available()}


def make_loader(names, batch_size: int = 64, shuffle: bool = True, seed: int = 0,
                drop_last: bool = False, num_workers: int = 0) -> DataLoader:
    """A DataLoader of padded ``(X, Y)`` batches; the order depends only on ``seed``.

    ``names`` is a list of names or a ``NamesDataset``; ``num_workers``: see ``worker_options``.
    """
    dataset = names if isinstance(names, Dataset) else NamesDataset(names)
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=collate,
                      generator=generator, drop_last=drop_last, **worker_options(num_workers))


# -----------------------------------------------------------------------------
# batches of names of similar length ("sortish" batching)

class SortishBatchSampler(Sampler):
    """Batches of indices of names of about the same length, so that a batch is hardly padded.

    Every pass over the data: shuffle all the indices (``torch.Generator`` seeded with ``seed``
    plus the pass number), cut them into pools of ``pool`` batches, sort each pool by length and
    cut it into batches, then shuffle the order of all the batches. Every name is used exactly
    once per pass, as with ``shuffle=True``; only which names share a batch changes: with
    ``pool=4``, the shortest quarter of a pool, the next quarter, and so on. A larger pool leaves
    less padding (names of 128: 41% padding unsorted, 18% with pools of 4, 2% with pools of 50)
    but makes each batch a less varied sample: after 1,500 steps of the 4-layer GPT the validation
    loss (excluding the first letter) was 1.930 unsorted, 1.975 with pools of 4 and 1.999 with pools
    of 50; after 5,000 steps of the 2-layer GPT with AdamW (``PADDED_CPU_CONFIG`` in benchmarks/train_names.py), 1.838
    unsorted and 1.861 with pools of 4. Packed batches (``make_packed_loader``) remove more padding at no such cost.

    ``lengths[i]`` is the length of item ``i`` (any unit: only the order matters). The last
    batch of a pool may be smaller; ``drop_last=True`` drops those smaller batches.
    """

    def __init__(self, lengths, batch_size: int, seed: int = 0, pool: int = 4, drop_last: bool = False):
        if batch_size < 1 or pool < 1:
            raise ValueError(f"batch_size and pool must be at least 1, got {batch_size} and {pool}")
        self.lengths = torch.as_tensor(list(lengths), dtype=torch.long)
        self.batch_size, self.seed, self.pool, self.drop_last = batch_size, seed, pool, drop_last
        self.epoch = 0  # passes started so far: each one is shuffled differently

    def batches(self, epoch: int) -> list[list[int]]:
        """The batches of pass number ``epoch`` (0, 1, ...), in the order they are served."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.lengths), generator=generator)
        size = self.pool * self.batch_size
        batches = []
        for start in range(0, len(order), size):
            chunk = order[start:start + size]
            chunk = chunk[torch.argsort(self.lengths[chunk], stable=True)]
            for b in range(0, len(chunk), self.batch_size):
                batch = chunk[b:b + self.batch_size].tolist()
                if len(batch) == self.batch_size or not self.drop_last:
                    batches.append(batch)
        shuffled = torch.randperm(len(batches), generator=generator).tolist()
        return [batches[i] for i in shuffled]

    def __iter__(self):
        batches = self.batches(self.epoch)
        self.epoch += 1
        return iter(batches)

    def __len__(self) -> int:
        n, size = len(self.lengths), self.pool * self.batch_size
        full, rest = divmod(n, size)
        per_pool = self.pool
        last = rest // self.batch_size if self.drop_last else -(-rest // self.batch_size)
        return full * per_pool + last


def make_sortish_loader(names, batch_size: int = 64, seed: int = 0, pool: int = 4,
                        drop_last: bool = False) -> DataLoader:
    """Like ``make_loader(names, batch_size, shuffle=True, seed=seed)``, but each batch holds names
    of (nearly) the same length, so almost nothing is padding (see ``SortishBatchSampler``).

    The batches are ``(X, Y)`` exactly as ``collate`` makes them: the loss, ``train_step`` and
    ``evaluate`` do not change.
    """
    dataset = names if isinstance(names, Dataset) else NamesDataset(names)
    lengths = [len(name) for name in dataset.names] if hasattr(dataset, "names") else \
        [len(dataset[i][0]) for i in range(len(dataset))]
    sampler = SortishBatchSampler(lengths, batch_size, seed=seed, pool=pool, drop_last=drop_last)
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)


def padding_fraction(loader, max_batches: int | None = None) -> float:
    """The fraction of the input positions of ``loader``'s batches that are padding (``Y == PAD_Y``),
    over its first ``max_batches`` batches (all when ``None``)."""
    padded = total = 0
    for i, (_, y) in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        padded += int((y == PAD_Y).sum())
        total += y.numel()
    return padded / max(total, 1)


# -----------------------------------------------------------------------------
# packed batches: several names per row, none of them padded

PACK_WIDTH = 16  # positions per packed row: the position table of notebook 07's GPT (max_len 16)


def pack_names(batch, width: int = PACK_WIDTH) -> tuple[torch.Tensor, torch.Tensor]:
    """A list of ``(x, y)`` pairs -> ``X [R, width]``, ``Y [R, width]``: the names laid end to end in rows.

    Longest name first, each goes into the row with the least room that still fits it (a new row when
    none does), so a row holds two or three names and only its end is padded (``PAD_X`` in ``X``,
    ``PAD_Y`` in ``Y``). Each name keeps its own ``' '`` at the start of its ``x``: that is how
    ``name_positions`` and ``same_name_mask`` find where it begins. The same names give the same targets
    as ``collate``, in fewer positions.
    """
    lengths = [len(x) for x, _ in batch]
    order = sorted(range(len(batch)), key=lengths.__getitem__, reverse=True)
    rows_with_room = [[] for _ in range(width + 1)]  # rows_with_room[r]: the rows with exactly r free positions
    room, start = [], [0] * len(batch)  # free positions of each row; where each name starts (flat index)
    for i in order:
        n = lengths[i]
        if n > width:
            raise ValueError(f"a name of {n - 1} letters needs {n} positions, but packed rows have {width}: "
                             f"use a larger width")
        fits = next((r for r in range(n, width + 1) if rows_with_room[r]), None)
        if fits is None:
            row = len(room)
            room.append(width)
        else:
            row = rows_with_room[fits].pop()
        start[i] = row * width + width - room[row]
        room[row] -= n
        rows_with_room[room[row]].append(row)
    n = torch.tensor(lengths)
    first = torch.cumsum(n, 0) - n  # where each name starts in the concatenation of all names
    where = torch.tensor(start).repeat_interleave(n) + torch.arange(int(n.sum())) - first.repeat_interleave(n)
    X = torch.full((len(room) * width,), PAD_X, dtype=torch.long)
    Y = torch.full((len(room) * width,), PAD_Y, dtype=torch.long)
    X[where] = torch.cat([x for x, _ in batch])
    Y[where] = torch.cat([y for _, y in batch])
    return X.view(-1, width), Y.view(-1, width)


def make_packed_loader(names, batch_size: int = 64, seed: int = 0, width: int = PACK_WIDTH,
                       num_workers: int = 0) -> DataLoader:
    """Like ``make_loader(names, batch_size, shuffle=True, seed=seed, num_workers=num_workers)``: the same names in
    the same batches, but each batch packed into rows of ``width`` positions (``pack_names``), so that almost nothing
    is padding.

    A model trained on these batches must keep each name to itself: ``tutor.train.PackedNames`` gives the
    GPT ``same_name_mask`` and ``name_positions``. Then the loss of a batch is the loss of the same names
    padded, up to float rounding.
    """
    dataset = names if isinstance(names, Dataset) else NamesDataset(names)
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator,
                      collate_fn=partial(pack_names, width=width), **worker_options(num_workers))


def name_starts(ids: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` bool: True where a name starts (its ``' '``). Padding is ``' '`` too, so each padded
    position counts as a name of its own: nothing real ever attends to it, and the loss ignores it."""
    return ids == PAD_X


def name_positions(ids: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` LongTensor: each position's place inside its own name (0 at its ``' '``).

    ``" ann bo"`` -> ``[0, 1, 2, 3, 0, 1, 2]``. On a padded batch (one name per row) it is ``arange(T)``
    up to the padding."""
    T = ids.shape[-1]
    index = torch.arange(T, device=ids.device).expand_as(ids)
    start = torch.where(name_starts(ids), index, torch.zeros_like(index)).cummax(dim=-1).values
    return index - start


def same_name_mask(ids: torch.Tensor) -> torch.Tensor:
    """``[B, T, T]`` bool: True where query position ``i`` and key position ``j`` belong to the same name.

    Give it to the GPT as ``mask``: its attention ANDs it with the causal mask, so each position sees
    only the earlier characters of its own name."""
    name = name_starts(ids).cumsum(dim=-1)  # which name of the row each position belongs to
    return name.unsqueeze(-1) == name.unsqueeze(-2)
