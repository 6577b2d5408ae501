"""API keys, as every front end checks them: `Bearer KEY` (HTTP's `Authorization` header, gRPC's
metadata) compared with every key in constant time. Keys are never logged."""

from __future__ import annotations

import hmac
from collections.abc import Sequence


def bearer_matches(authorization: bytes, keys: Sequence[bytes]) -> bool:
    """Whether an `Authorization` value is `Bearer KEY` with one of `keys` (HTTP's header,
    gRPC's metadata)."""
    scheme, _, token = authorization.partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    token = token.strip()
    # Compare with every key (no early exit) so timing says nothing about which.
    matches = [hmac.compare_digest(token, key) for key in keys]
    return any(matches)
