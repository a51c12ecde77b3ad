"""The example shop: an online store for cat food and supplies, run on several instances."""
