"""The PyTorch runtime (`--backend torch`, `torch_backend`): the loaded model
(backends/torch_model/) run eagerly, or its main head compiled where it pays (`compile_gain`): ahead
of time into a cache on disk (`aot`, `aot_runtime`), or by torch.compile (`jit`); a restart served
from the cache alone (`cached_start`)."""
