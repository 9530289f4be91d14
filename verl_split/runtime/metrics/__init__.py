"""The whole-step metrics added to verl's tracker, and the Chrome-trace timeline of the lanes."""
