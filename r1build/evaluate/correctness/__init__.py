"""Correctness: the plan of checks of a kernel (:mod:`.plan`), their run for one candidate on one GPU
(:mod:`.candidate`), the comparison of one call's bytes (:mod:`.compare`), test inputs and precision, the checks at
the benchmark shapes (:mod:`.bench`, :mod:`.bench_extra`), and ``r1build check``'s CPU run of the references
(:mod:`.references`)."""
