"""What runs inside verl's processes, one folder per feature: each holds its logic and its seam table
(``seams.py``), which ``verl_split.plugin.activation`` collects."""
