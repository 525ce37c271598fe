"""Choosing winners: the rules (:mod:`.rules`) and the noise of a timing they compare by (:mod:`.noise`).

The face imports nothing: the GPU worker imports :mod:`.noise` (pure Python) without the rules."""
