"""The Confluent REST Proxy v2 API, served by every broker (docs/http.md, ADR 0034)."""
