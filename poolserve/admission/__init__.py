"""Admission, on a floor of its own below every front end: what admitted requests may cost
(`control`, with its tickets, waiting line and prices), what a caller asks beside its body
(`asked`), and the memory bound that sizes it (`budget`). HTTP's door to it is an ASGI layer of
the front end (server/middleware/admission_door.py); gRPC's servicer enters it itself."""
