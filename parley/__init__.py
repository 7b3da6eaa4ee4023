"""parley: durable AI agent sessions served over the Model Context Protocol."""

__version__ = "0.1.0"
