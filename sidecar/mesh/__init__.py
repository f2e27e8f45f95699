"""Links to teammates' sidecars: QUIC transport, one link per peer (hello and features), the frame
registry, presence frames, roster sync, joining a team and mDNS discovery.
"""
