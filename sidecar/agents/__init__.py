"""What agents' harnesses ask of the sidecar: the hook ops, the push watcher, a plugin's events,
registering, renaming, ending and listing sessions, and ``ask``. Each answer composes the concepts below
it (mail to show, presence to record, the gate's breakpoints, turn-tier lessons) for one session.
"""
