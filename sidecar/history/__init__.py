"""The team's history, on its anchor, opt-in per person: what each machine archives of its person's
mail (entries, the archive and its queue), what the anchor keeps and searches (the keeper), asking
the anchors, and the ops (``history``, ``history_search``).
"""
