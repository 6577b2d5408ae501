"""Bulk embedding (`poolserve embed`): a corpus file in, its embeddings out, resumable."""
