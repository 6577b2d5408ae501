"""text-embeddings-inference's API: its request bodies (`requests.py`), its answers, documented
and encoded (`answers.py`), its endpoints (`endpoints.py`) and `/info` (`info.py`)."""

from poolserve.server.apis.tei.endpoints import ENDPOINTS
from poolserve.server.apis.tei.info import ROUTES

__all__ = ["ENDPOINTS", "ROUTES"]
