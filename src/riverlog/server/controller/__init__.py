"""The controller's edge: its event queue and service, its channel to brokers, the
controller election, and the runners of leader rebalancing and reassignments. Decisions
live in the pure `riverlog.controller` package."""
