"""Where the edge leaves what it learns of a request in its ASGI scope, for the layers and the
route after it: the keys, on the ground floor, so that every layer reads them without importing
the layer that writes them."""

from __future__ import annotations

# The request's id: the client's `x-request-id`, or a new one (the metrics layer, the hot
# routes).
REQUEST_ID_KEY = "poolserve.request_id"
# The served name of the model the request is for (set once the handler chose it).
MODEL_KEY = "poolserve.model"
# What the request's headers ask beside its body (`Asked`), read once at the door.
ASKED_KEY = "poolserve.asked"
# Its admission ticket, and when it was admitted (perf_counter seconds; its trace shows it).
TICKET_KEY = "poolserve.admission"
ADMITTED_KEY = "poolserve.admitted"
# Its ServeContext once the template made it (its trace reads it).
CONTEXT_KEY = "poolserve.context"
# Set where the hot routes drew this request for a trace (the tracing layer draws no more).
SAMPLED_KEY = "poolserve.sampled"
