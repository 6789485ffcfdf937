"""Loss units: nats per token (what the model minimises) and bits per byte (comparable).

Nats per token depend on the tokenizer: a bigger vocabulary packs more text into a token, so
its loss per token is higher for the same model quality. Bits per byte divide that away:

    bits/byte = (nats/token) / ln 2 / (bytes/token)

with bytes/token measured on the split being scored (``TokenSplit.bytes_per_token``, or exactly
on a set of target tokens with ``Tokenizer.token_byte_lengths``).
"""

from __future__ import annotations

import math


def nats_to_bits_per_byte(loss_nats_per_token: float, bytes_per_token: float) -> float:
    """Convert a cross-entropy in nats per token to bits per byte of UTF-8 text."""
    if bytes_per_token <= 0:
        raise ValueError(f"bytes_per_token={bytes_per_token} must be > 0")
    return loss_nats_per_token / math.log(2) / bytes_per_token
