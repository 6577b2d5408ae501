"""The loaded model, which every runtime that runs a transformer starts from: the checkpoint
placed (`device`) and its weights loaded into a transformers backbone with its pooling heads
(`loader`, `module`, `dense`, `token_pooling`, `sequence_head`, `image_text`), in the precision
asked for or measured fastest (`precision`), packed batches (`packing`, `attention_windows`),
batch-invariant kernels (`batch_invariant`, `invariant_kernels`), one batch through it on a
runner thread (`executor`), its warm-up (`warm_up`), the module built at its first call where a
restart needs no eager forward (`deferred_module`), the main head as a module to export
(`export_forward`) and the cache of what is built from it (`forward_cache`); all of it held
together by `loaded_model.LoadedModel`. The runtimes (`torch/`, `onnxruntime/`, `openvino/`)
compose one; none imports another."""
