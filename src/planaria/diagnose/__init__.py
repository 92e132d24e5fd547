"""Global state collection, offline diagnosis and the stack-sampling hang filter (paper 000 §2.3, §2.4)."""
