"""The MCP server every harness starts: hive's tools for an agent."""
