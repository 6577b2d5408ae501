"""Admission: what admitted requests may cost, checked at the door before a body is read
(`control`, and the ASGI middleware `door`), and the memory bound that sizes it (`budget`)."""
