"""What the server tells about itself, on a floor of its own below every front end: Prometheus
metrics (`metrics`), tracing (`tracing`), the recent history the playground's live panel draws
(`live`), and the event loop's lag (`loop_lag`)."""
