"""The PyTorch backend (`--backend torch`, `torch_backend`): the checkpoint placed (`device`) and
its weights loaded into a transformers backbone with its pooling heads (`loader`, `module`,
`dense`, `token_pooling`, `image_text`), packed batches (`packing`), the forward on a runner
thread (`executor`), and the main head compiled: ahead of time into a cache on disk (`aot`,
`aot_cache`, `aot_runtime`), or by torch.compile (`jit`). The only place of the package that
imports torch."""
