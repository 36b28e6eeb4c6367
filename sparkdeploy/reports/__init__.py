"""What the operator reads at the end of a run: notices, the status table, the diagnosis."""
