"""N-ABFT: algorithm-based fault tolerance for row-partitioned neighbourhood analysis ([Song 2013]).

A pure model, numpy and the standard library only, with no MPI, and the runtime that runs it
on MPI ranks. A DEM of H rows is cut
into N contiguous row blocks. Each worker also computes one extra output row, the first
row of the next block. The masters compare the two results for that row (the "check result" from
worker i and the "checked result" from worker i+1). They use the comparison to find faulty
workers and to plan recomputation.

* :mod:`planaria.abft.partition`: blocks, halo, NRow (Definition 4), Properties 1 and 2.
* :mod:`planaria.abft.verify`: verification set V, bit-exact comparison, locating faults
  (Algorithm 1), timeouts, block digests (an extension).
* :mod:`planaria.abft.taskrecovery`: the recovery planner (Algorithm 2) and the two masters.
* :mod:`planaria.abft.masterworker`: the masters and workers on real MPI ranks (numpy, MPI;
  ``python -m planaria.abft.masterworker``).
"""
