"""The pipeline: trace, compile, time and check a list of programs into one ``Analysis``.

``targets``: compile an already traced program for a TPU topology (``--target tpu:v5e:16x16``)
on a machine without TPUs.
"""
