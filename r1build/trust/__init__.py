"""What is trusted: Ed25519 keys, signatures over cache entries and bundles (:mod:`.signing`)."""
