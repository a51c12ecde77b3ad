"""What every store shares: the store protocol, its capabilities and their records."""
