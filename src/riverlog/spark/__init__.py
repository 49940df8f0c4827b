"""riverlog's Spark connector: `format("riverlog")` for `spark.read`, `spark.readStream`,
`df.write` and `df.writeStream`, on PySpark's Python Data Source API (pyspark ≥ 4.2).

Option names and the schema are those of Spark's Kafka connector (`kafka.bootstrap.servers`,
`subscribe`, `startingOffsets`, ...; columns key, value, topic, partition, offset, timestamp,
timestampType, headers). Modules: `options` (parsing), `ranges` (cutting work into tasks),
`offsets` (the driver's offset lookups), `reading` (a task's fetches into Arrow), `source`
(the data source and its readers), `sink` (the writers). Only this package imports pyspark.
"""
