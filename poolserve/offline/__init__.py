"""The Python API: `Engine` (one model's methods, each in three call styles: `call_styles`),
`ModelSet` (several models on one CPU pool), their arguments checked in Python's terms
(`arguments`)."""
