"""What each session is doing: harness events, activity, files touched, overlap, sessions found on
disk, and presence frames (this machine's sessions told to teammates, theirs kept and listed)."""
