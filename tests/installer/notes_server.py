"""A one-tool stdio MCP server standing in for a person's own MCP server in the harness configs."""

from mcp.server.mcpserver import MCPServer

server = MCPServer(name="notes")


@server.tool()
def note(text: str) -> str:
    """Remember a note."""
    return f"noted: {text}"


if __name__ == "__main__":
    server.run("stdio")
