"""The verl-split command (cli) and its subcommands: doctor, plan, demo, advise. Never imported by a verl
process."""
