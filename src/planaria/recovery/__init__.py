"""Recovery: spares, roles, logical-rank substitution ([Bondarenko 2015])."""
