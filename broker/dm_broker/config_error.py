"""The error every configuration check raises, in a module of its own: clients (the CLI's, the Spark
connector's) check their settings with it without loading the broker's whole configuration schema."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is unknown or invalid."""
