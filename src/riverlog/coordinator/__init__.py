"""Consumer groups and committed offsets: pure state machines and the __consumer_offsets formats."""
