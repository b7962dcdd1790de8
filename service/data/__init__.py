"""What is stored: the SQLAlchemy models, and the built-in data (the hardware catalog, every figure
sourced)."""
