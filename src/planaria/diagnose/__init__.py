"""Global state collection, offline diagnosis and the stack-sampling hang filter ([Gao 2024] §2.3, §2.4)."""
