"""text-embeddings-inference's API: its request bodies (`requests.py`), its answers, documented
and encoded (`answers.py`), and its endpoints (`endpoints.py`)."""

from poolserve.server.apis.tei.endpoints import ENDPOINTS, ROUTES

__all__ = ["ENDPOINTS", "ROUTES"]
