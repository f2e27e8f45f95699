"""Messages between sessions and people: mailboxes, addresses, rendering for a model, attachments, the
mail guards, inbound policy, delivery into running sessions (Codex's push too), desktop notifications,
and remote mail: the outbox, acks and receipts with teammates' machines, copies read elsewhere, and
held mail.
"""
