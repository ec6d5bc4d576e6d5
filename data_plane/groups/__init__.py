"""Consumer groups: configuration, membership, sticky assignment and lag."""
