"""compute-sanitizer: its runs on small shapes (:mod:`.runner`) and their batching over the evaluator's candidates
(:mod:`.schedule`)."""
