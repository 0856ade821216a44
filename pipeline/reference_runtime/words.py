"""TensorRT-LLM's word-list tensor format ([2, N]: row 0 = concatenated token ids, row 1 = end offsets
padded with -1) to and from lists of token sequences. Pure functions, used by preprocessing-side tests
and the reference runtime."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def to_word_list(words: Sequence[Sequence[int]]) -> np.ndarray:
    """[[1, 2], [3]] -> [[1, 2, 3], [2, 3, -1...]] as int32 [2, max(1, N)]."""
    flat: list[int] = []
    offsets: list[int] = []
    for word in words:
        if not word:
            continue
        flat.extend(int(t) for t in word)
        offsets.append(len(flat))
    width = max(1, len(flat))
    out = np.zeros((2, width), dtype=np.int32)
    out[1, :] = -1
    out[0, : len(flat)] = flat
    out[1, : len(offsets)] = offsets
    return out


def from_word_list(array: np.ndarray | None) -> list[list[int]]:
    """Inverse of to_word_list; accepts [2, N] or [1, 2, N]. Empty/None -> []."""
    if array is None:
        return []
    arr = np.asarray(array)
    while arr.ndim > 2:
        arr = arr[0]
    if arr.ndim != 2 or arr.shape[0] != 2:
        raise ValueError(f"word list must have shape [2, N], got {list(np.asarray(array).shape)}")
    ids, offsets = arr[0].tolist(), arr[1].tolist()
    words: list[list[int]] = []
    start = 0
    for end in offsets:
        if end < 0:
            break
        if end > len(ids) or end <= start:
            raise ValueError(f"word list offsets must increase within {len(ids)} ids, got {offsets}")
        words.append([int(t) for t in ids[start:end]])
        start = end
    return words


def ends_with_any(tokens: Sequence[int], words: Sequence[Sequence[int]]) -> list[int] | None:
    """The first word that tokens end with, or None."""
    for word in words:
        n = len(word)
        if n and len(tokens) >= n and list(tokens[-n:]) == list(word):
            return list(word)
    return None
