"""Who is in the team: the signed roster, identities, approvals, code owners and projects."""
