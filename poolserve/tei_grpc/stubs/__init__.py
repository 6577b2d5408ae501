"""text-embeddings-inference's messages (`tei_pb2`), generated from `../proto/tei.proto` when
poolserve is built or installed (setup.py); not checked in."""
