"""What backward=lsh's dQ or dK costs on the numba CPU kernel, counted from that kernel.

`kernels.lsh.cpu.weighted_cumulation` builds no 2^tau tables. A work unit is a plane and a
block of `width` output columns; per hash it sorts the write and the read rows by code
(radix sort, RADIX_BITS a pass) and walks the buckets: a bucket's table sum_w weights_w^T
vectors_w (A x width floats, in L1) is built from its write rows and applied to its read
rows. So per hash the unit reads its rows once (weights and read weights whole, vectors
and its output columns once per span of A), and its table traffic never leaves L1; the
products are multiply-adds, a matrix product per bucket.
"""

from __future__ import annotations

from attnbench.backends.cost import Cost, Shape
from attnbench.kernels.lsh import cpu

FLOAT = 4  # bytes of the kernel's float32 and int32


def sorted_weighted(shape: Shape, m: int, tau: int) -> Cost:
    """One of dQ, dK (then x tau/2): n write and n read rows, A = d_v weight columns,
    D = d vector columns, G planes, m hashes; units of `width` columns (`cpu._column_blocks`),
    A in spans of `span` columns (the bucket table's BUCKET_FLOATS), P radix passes.

    matmul: 2 G m (n + n) A D (each write row adds A x D products into its bucket's
    table, each read row takes A x D from it). other: 1/m and tau/2, 2 G n D. Bytes, per
    unit and hash: both code columns 4 (2n); each side's sort writes order and keys 8n,
    then per pass reads the keys 4n, reads and writes order and keys 16n; the walk reads
    both sorted lists 16n; the rows 4 n (2A + 3 width x spans): weights and read weights,
    then per span the vectors read and the output read and written. Per unit once: the
    output zeroed, then scaled by 1/m, 4 n width 3; then tau/2, 8 G n D. Working set: the
    rows and codes of a unit and the sort buffers, on each worker."""
    g, n, d, a = shape.planes, shape.n, shape.dim, shape.dv
    width, workers = cpu._column_blocks(g, d)
    units = g * -(-d // width)
    spans = -(-a // max(1, min(a, cpu.BUCKET_FLOATS // width)))
    passes = -(-tau // cpu.RADIX_BITS)
    codes = FLOAT * 2 * n
    sort = 2 * (8 * n + 20 * n * passes)
    walk = 16 * n
    rows = FLOAT * n * (2 * a + 3 * width * spans)
    once = FLOAT * 3 * n * width
    scale = 8 * g * n * d
    resident = FLOAT * (n * (2 * a + 2 * width + 2 * m + 8) + cpu.BUCKET_FLOATS)
    return Cost(
        matmul_flops=2.0 * g * m * 2 * n * a * d,
        other_flops=2.0 * g * n * d,
        bytes=float(units * (m * (codes + sort + walk + rows) + once) + scale),
        working_set=float(min(workers, units) * resident),
    )
