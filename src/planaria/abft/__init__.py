"""N-ABFT: algorithm-based fault tolerance for row-partitioned neighbourhood analysis ([Song 2013]).

A pure model, numpy and the standard library only, with no MPI. A DEM of H rows is cut
into N contiguous row blocks. Each worker also computes one extra output row, the first
row of the next block. The masters compare the two results for that row (the "check result" from
worker i and the "checked result" from worker i+1). They use the comparison to find faulty
workers and to plan recomputation.

* :mod:`planaria.abft.partition`: blocks, halo, NRow (Definition 4), Properties 1 and 2.
* :mod:`planaria.abft.verify`: verification set V, bit-exact comparison, locating faults
  (Algorithm 1), timeouts, block digests (an extension).
* :mod:`planaria.abft.recovery`: the recovery planner (Algorithm 2) and the two masters.
"""
