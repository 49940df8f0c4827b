"""The broker's Prometheus metrics (`metrics.listener`): request counters fed by the
dispatcher (`requests`), gauges computed from the broker's state at scrape time (`gauges`,
with the time-lag estimate of `lag`), and the HTTP endpoint that owns the registry
(`endpoint`)."""
