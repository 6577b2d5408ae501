"""What the graph runtimes (ONNX Runtime, OpenVINO) share: the loaded model's main head exported
to ONNX into the cache (`onnx_export`), its int8 graphs built behind the quality gate by a
runtime's quantizer (`int8_cache`), and the backend that runs a graph on a runtime
(`graph_backend`)."""
