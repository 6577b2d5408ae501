"""The Python API: `Engine` (one model's methods, each written once as the builder of its
request, `builders`, and made in three call styles, `call_styles`), `ModelSet` (several models on
one CPU pool), their arguments checked in Python's terms (`arguments`)."""
