"""riverlog's web console (`riverlog console`): brokers, topics, consumer groups with lag over
time, a message browser, throughput and reassignments, served by aiohttp as server-rendered
pages, with uPlot (vendored under static/, MIT licence) drawing the charts.

It uses only riverlog's client, so it works against any Kafka cluster. Modules: `queries`
(what it asks the cluster), `history` and `sampler` (lag and offsets kept in memory over
time), `html` and `pages_*` (rendering), `app` (routes and forms).
"""
