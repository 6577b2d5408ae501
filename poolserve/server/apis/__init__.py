"""The API families poolserve speaks, one module each: its request schemas, answer docs,
encoders and endpoint declarations (see `server/endpoint.py`)."""
