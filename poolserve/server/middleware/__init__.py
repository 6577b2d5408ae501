"""The ASGI middleware around the routes that is not admission or observation: API keys (`auth`),
body size (`body_limit`), and the direct dispatch of the API's own routes (`dispatch`)."""
