"""CPU dry run: a CPU platform for verl and a Hugging Face stand-in for vLLM/SGLang.

Loaded only when ``VERL_SPLIT_CPU`` is on (by the ``cpu_*`` seams), or by the demo
and the tests; importing this package imports nothing heavy.
"""
