"""What the server tells about itself: Prometheus metrics (`metrics`), the recent history the
playground's live panel draws (`live`), and the event loop's lag (`loop_lag`)."""
