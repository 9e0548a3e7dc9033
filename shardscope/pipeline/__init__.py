"""The analysis pipeline: what turns settings and traced programs into shardscope's values.

``targets``: compile an already traced program for a TPU topology (``--target tpu:v5e:16x16``)
on a machine without TPUs.
"""
