"""Messages between sessions and people: mailboxes, addresses, rendering for a model, attachments, the
mail guards, inbound policy and delivery into running sessions.
"""
