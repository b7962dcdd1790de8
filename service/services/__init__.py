"""Use cases: take a session and plain values, return domain objects; the only code that commits."""
