"""Controllers of access: what ends when a person is let go."""
