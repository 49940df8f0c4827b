"""Record data: legacy message sets (magic 0/1), v2 record batches, compression."""
