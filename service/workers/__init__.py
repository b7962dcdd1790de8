"""Work done in the background of each process: fit jobs, webhook deliveries, the purge of expired
Idempotency-Keys, and the listener that tells the process's caches what changed."""
