"""parley as an OAuth client of downstream MCP servers, one principal at a time (docs/credentials.md#user-oauth):
discovery and the token endpoint (client.py), the pending flows and their owner-verified
completion (flows.py), and the bearer tokens connections carry (bearer.py)."""
