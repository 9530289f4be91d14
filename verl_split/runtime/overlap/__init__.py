"""Phases on both pools at once: the updates, the preparation, and the critic's update deferred into the
next step; ``lanes`` holds what the three share."""
