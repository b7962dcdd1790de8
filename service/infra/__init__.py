"""What every layer above runs on: configuration, the database's engines and sessions, migrations, logs,
metrics, request ids, locks and background threads. Nothing here knows a use case."""
