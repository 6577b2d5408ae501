"""The ONNX Runtime backend (`--backend onnxruntime`, and `auto` with `--quantize int8`)."""
