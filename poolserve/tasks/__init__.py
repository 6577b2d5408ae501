"""Task processors: what each kind of request tokenizes, and how its outputs become a response."""
