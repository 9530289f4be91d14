"""The CPU dry run seen from outside verl: its Hydra recipe, the tiny assets, the main_ppo runner and the
reports of its runs. Used by the demo, the tests and the benchmarks."""
