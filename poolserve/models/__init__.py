"""A checkpoint described before anything is loaded, torch-free: its directory (`resolve`), its
layout (`layout`, `vision`), what kind of model it is (`kinds`), the LLM reranker's template
(`score_template`), and all of it together (`describe` makes a `spec.ModelSpec`). The weights
are a backend's to load (`backends/`)."""
