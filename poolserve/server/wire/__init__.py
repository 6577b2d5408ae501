"""Response bodies, one module per API family (OpenAI, vLLM/Jina, text-embeddings-inference),
each built from a task's result in the CPU pool. The tasks stop at their results; these say
how each family writes them."""
