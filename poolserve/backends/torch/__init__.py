"""The PyTorch backend (`--backend torch`): the checkpoint's weights loaded into a transformers
backbone with its pooling heads (`loader`, `module`, `dense`, `pooling`, `image_text`), packed
batches (`packing`), the forward on a runner thread (`executor`), and compiling it ahead of time
(`aot`, `aot_runtime`, `compiled`). The only place of the package that imports torch."""
