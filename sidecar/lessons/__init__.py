"""What the team has learned: lesson records, their store and sync, review, promotion to skills and recall."""
