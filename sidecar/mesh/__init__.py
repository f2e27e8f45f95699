"""Links to teammates' sidecars: QUIC transport, one link per peer, roster sync and remote frames."""
