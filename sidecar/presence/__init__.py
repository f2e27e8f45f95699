"""What each session is doing: harness events, activity, files touched, overlap and sessions found on disk."""
