"""Glue for frameworks; each module is imported explicitly and imports its framework lazily."""
