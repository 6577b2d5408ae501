"""Inputs made ready for a model, on the CPU pool's threads: each thread's tokenizer
(`tokenizer`), an image-text model's image processor (`image_processor`), and image inputs read
safely (`images/`)."""
