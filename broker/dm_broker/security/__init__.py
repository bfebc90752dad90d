"""Listeners, TLS, SASL, principals and ACLs (ADR 0021)."""
