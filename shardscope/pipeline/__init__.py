"""The pipeline: trace, compile, time and check a list of programs into one ``Analysis``."""
