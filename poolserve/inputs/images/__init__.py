"""Image inputs, read safely: where an image may come from (`policy`), how its reference becomes
bytes (`sources`, and `fetch` for allowed URLs), and how bytes become pixels (`decode`). The
engine's image processor (inputs/image_processor.py) makes the model's input of them."""
