"""The HTTP front end: a thin async adapter over the serving step (serving/) and the API
families (apis/): its routes, its edge and its errors, which the serving process's factory
(app/factory.py) assembles into the app."""
