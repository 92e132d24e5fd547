"""Trace records of fragmented programs: the per-rank writer, the post-mortem analyzer, Perfetto export."""
from planaria.trace.writer import TraceWriter, read_traces, trace_path

__all__ = ["TraceWriter", "read_traces", "trace_path"]
