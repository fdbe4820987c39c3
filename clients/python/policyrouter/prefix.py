"""Block hashes of a token prompt, for prefix-cache-aware leases.

The router routes a request where its prompt's blocks are already cached
when the request names them: ``prefix_hashes`` of ``/select`` and
``/assign``, and of ``/release`` for the prompt and the tokens generated
after it. :func:`prefix_hashes` computes them as the router does (Go
package ``prefix``, ``openapi.yaml`` schema ``PrefixHashes``):

- the token ids are cut into blocks of 16; a trailing partial block is not
  hashed;
- block *i*'s hash is the first 8 bytes of SHA-256 over the 8 bytes of
  block *i-1*'s hash followed by the block's 16 ids as little-endian
  uint32 (64 bytes); block 0's parent is the first 8 bytes of
  SHA-256(``b"policyrouter-prefix-tokens-v1"``);
- a hash is those 8 bytes read as a little-endian uint64, written as 16
  lowercase hex digits.

The hash is computed without I/O and in the standard library only, so the
sync and async clients share it.
"""

import hashlib
import struct
from typing import Iterable, List

__all__ = ["prefix_hashes", "BLOCK_TOKENS", "MAX_BLOCKS"]

#: Token ids in a block.
BLOCK_TOKENS = 16
#: The most blocks the router reads of one ``prefix_hashes`` (32768 tokens).
MAX_BLOCKS = 2048

_SEED = hashlib.sha256(b"policyrouter-prefix-tokens-v1").digest()[:8]
_BLOCK = struct.Struct("<16I")


def prefix_hashes(token_ids: Iterable[int], max_blocks: int = MAX_BLOCKS) -> List[str]:
    """Return the hex hashes of the full blocks of ``token_ids``, at most
    ``max_blocks`` of them (:data:`MAX_BLOCKS` when it is not positive).

    Each id is hashed as its low 32 bits. Hashes of a prompt followed by
    its output extend the prompt's hashes, so the same function serves
    ``/select`` (the prompt) and ``/release`` (prompt + output).

    >>> prefix_hashes(range(32))
    ['4cbad8846f198735', '9bb8595dc4144fe0']
    """
    ids = [int(t) & 0xFFFFFFFF for t in token_ids]
    if max_blocks <= 0 or max_blocks > MAX_BLOCKS:
        max_blocks = MAX_BLOCKS
    n = min(len(ids) // BLOCK_TOKENS, max_blocks)
    parent = _SEED
    out = []
    sha256, pack = hashlib.sha256, _BLOCK.pack
    for b in range(0, n * BLOCK_TOKENS, BLOCK_TOKENS):
        parent = sha256(parent + pack(*ids[b:b + BLOCK_TOKENS])).digest()[:8]
        out.append(parent[::-1].hex())
    return out
