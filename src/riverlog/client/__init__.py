"""riverlog's own Kafka client (asyncio): connections and admin operations so far."""
