"""The HTTP front end's ASGI layers around the routes: API keys (`auth`), body size
(`body_limit`), admission's door (`admission_door`), the request's id, counts and times
(`metrics_layer`), sampled tracing (`trace_requests`), and the direct dispatch of the API's own
routes (`dispatch`)."""
