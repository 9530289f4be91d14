"""What every part of verl-split reads: errors, logging, the VERL_SPLIT* settings, the verl releases and their
differences, and the split/* metric names. Standard library and packaging only: the bootstrap imports it in every
process of every verl run."""
