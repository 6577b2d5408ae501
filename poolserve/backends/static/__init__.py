"""The static runtime: a static embedding model's table looked up in numpy (`static_backend`),
with no transformer, no engine trials and nothing to compile (models/static_layout.py reads
the model)."""
