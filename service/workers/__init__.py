"""Work done in the background of each process: fit jobs, webhook deliveries, and the purge of expired
Idempotency-Keys."""
