"""Links to teammates' sidecars: QUIC transport, addresses, one link per peer (hello and features),
the frame registry and its speakers, roster sync, joining a team and mDNS discovery. What travels
on the links (presence, mail, notifications, gate items, lessons) is registered by its concept.
"""
