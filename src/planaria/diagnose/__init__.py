"""Global diagnosis of a running or hung job: state records and files, their offline analysis, and the
stack-sampling filter that finds the few threads stuck in one place (paper 000, section 2)."""
