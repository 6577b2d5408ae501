"""OpenAI's Batch API: `/v1/files` and `/v1/batches`, each batch's lines answered by their
route in the lowest lane, checkpointed and resumed after a restart (docs/batch-api.md)."""
