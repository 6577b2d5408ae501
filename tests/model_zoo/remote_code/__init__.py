"""The code shipped with the trust_remote_code models of the zoo, as source text to write.

Compact re-implementations of the real repositories' classes, under their class names, module
file names and weight names, without flash-attention, unpadding or training heads. Every file
imports only torch and transformers: nothing is fetched. Rotary frequencies and ALiBi slopes are
computed in forward, not kept in non-persistent buffers: transformers 5 builds a model on the
meta device and then fills non-persistent buffers with `torch.empty_like` and only
`_init_weights` writes them, so a custom class's buffer made in __init__ holds garbage after
from_pretrained.

One module per shipped repository: `nomic` (nomic-ai/nomic-bert-2048), `gte`
(Alibaba-NLP/new-impl), `jina_bert` (jinaai/jina-bert-implementation), `jina_xlm_roberta`
(jinaai/xlm-roberta-flash-implementation); `rotary` holds the helpers several of them inline.
"""

from __future__ import annotations
