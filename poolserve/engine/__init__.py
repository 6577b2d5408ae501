"""The engine, torch-free: the CPU pool, the scheduler that packs requests into token-budgeted
batches, the runner threads that run them through a backend (`model_backend` is the seam), the
request template every entrance drives (`pipeline`), and the statistics they keep."""
