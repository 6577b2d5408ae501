"""The rotary-embedding and padding-mask helpers inlined into several shipped modeling files."""

from __future__ import annotations

ROTARY_HELPERS = '''
def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, inv_freq):
    """Non-interleaved (GPT-NeoX style) rotary embedding of q and k, [batch, heads, seq, dim],
    over the first 2 * len(inv_freq) channels of each head; positions are 0 .. seq - 1."""
    rotary_dim = 2 * inv_freq.shape[0]
    positions = torch.arange(q.shape[-2], dtype=torch.float64, device=q.device)
    freqs = torch.outer(positions, inv_freq.to(device=q.device, dtype=torch.float64))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)

    def rotate(x):
        x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
        return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)

    return rotate(q), rotate(k)


def key_padding_mask(attention_mask, dtype):
    """[batch, seq] 1/0 -> an additive [batch, 1, 1, seq] mask for scaled_dot_product_attention."""
    blocked = attention_mask[:, None, None, :] == 0
    return torch.zeros(blocked.shape, dtype=dtype, device=attention_mask.device).masked_fill(
        blocked, torch.finfo(dtype).min
    )
'''
