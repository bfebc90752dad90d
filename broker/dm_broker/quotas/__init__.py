"""Client quotas (KIP-13, KIP-124, KIP-599): what a user or client id may use of a broker."""
