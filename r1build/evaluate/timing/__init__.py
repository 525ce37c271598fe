"""Timing: measuring on one GPU (:mod:`.measure`), the requests and statistics of samples (:mod:`.stats`), the
hardware floors (:mod:`.floors`) and the evaluator's own timeline (:mod:`.timeline`)."""
