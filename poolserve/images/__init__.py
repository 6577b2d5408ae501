"""Images for image-text models: where an image may come from (`policy`), how its reference
becomes bytes (`sources`, `fetch`), how bytes become pixels safely (`decode`), and how pixels
become the model's input, a work item's payload (`processor`)."""
