"""text-embeddings-inference's API: its request bodies (`requests.py`), its answers, documented
and encoded (`answers.py`), its endpoints (`endpoints.py`) and what `/info` says (`info.py`; the
route is server/admin_routes.py's)."""

from poolserve.apis.tei.endpoints import ENDPOINTS

__all__ = ["ENDPOINTS"]
