"""Recovery: spares, roles, logical-rank substitution (paper 001)."""
