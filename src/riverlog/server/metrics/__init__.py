"""The broker's Prometheus metrics (`metrics.listener`): request counters fed by the
dispatcher (`requests`), gauges computed from the broker's state at scrape time (`gauges`,
with the time-lag estimate of `lag`; `network` for listeners and the request memory pool),
ISR and rebalance counts kept where they are decided (`membership`), and the HTTP endpoint
that owns the registry (`endpoint`)."""
