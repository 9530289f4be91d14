"""Split placement at run time: verl's resource pools re-pointed to the plan's pools, pinned to their nodes."""
