"""What runs inside verl's processes, one folder per feature: each holds its logic and its seam table
(``seams.py``), which ``verl_split.seam_catalogue`` collects and hands to ``verl_split.plugin.activation``."""
