"""The agent sessions on this machine: the registry, their names, the hook ops that register and feed
them, MCP attachment and the folders where hive is off.
"""
