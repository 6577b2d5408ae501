"""The gRPC front end: text-embeddings-inference's `tei.v1` protocol (proto/tei.proto, vendored
with its licence; its message stubs generated at install) beside HTTP, over the same serving
step. Imported only when `--grpc-port` is given (it needs `poolserve[grpc]`)."""
